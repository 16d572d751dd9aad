"""`serve` leaves the heap it starts with out of the garbage collector's full collections."""

from __future__ import annotations

import gc

from gateway.service import freeze_startup_heap


def test_the_startup_heap_is_frozen() -> None:
    """What the process holds once started (here: the test process with the gateway
    imported, tens of thousands of objects) is frozen: no full collection walks it again."""
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()  # the test process goes on collecting everything
