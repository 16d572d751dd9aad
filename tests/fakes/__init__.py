"""Fakes that stand in for the outside world through real seams (loopback servers, not mocks)."""

# How long the fakes' `wait_for_…` helpers wait by default before they fail with what they
# saw. A passing test never waits it out, so it can be generous: the suite runs in two
# processes on two cores, beside whatever else the machine does.
WAIT_SECONDS = 30.0
