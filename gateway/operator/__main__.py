"""The `threadgate` command's entry: the installed script and `python -m gateway.operator`.

Both start here rather than in `gateway.operator.cli` so that the garbage collector is off
while the command loads. What loading builds (modules, classes, dataclasses, pydantic's
schemas, bolt) lives as long as the process: collecting while it is built found nothing
to free and was a sixth of the CPU of starting the gateway. `serve` turns the collector
back on, tuned, once it listens (`gateway.process.service.tune_garbage_collector`), and
`console` once its gateway is loaded; every other command is over in moments. Importing
`gateway.operator.cli` (as the tests do) leaves the collector alone.
"""

from __future__ import annotations

import gc
import sys


def main() -> int:
    gc.disable()
    from gateway.operator.cli import main as command_line

    return command_line()


if __name__ == "__main__":
    sys.exit(main())
