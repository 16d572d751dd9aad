"""Fakes that stand in for the outside world through real seams (loopback servers, not mocks)."""
