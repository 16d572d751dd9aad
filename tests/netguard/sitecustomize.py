"""Run by Python at start-up in every child process the tests start.

`tests.gateway.process.child_env` puts this directory first on the child's PYTHONPATH, so
this `sitecustomize` is the one `site` imports, before the child's own code: a gateway
child gets the same loopback-only guard as the test process, without a line of threadgate
knowing about it. `tests/test_hermetic.py` checks that it really loads.
"""

import loopback_guard

loopback_guard.install()
