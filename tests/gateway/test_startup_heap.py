"""`serve` leaves the heap it starts with out of the garbage collector's full collections,
and collects the young generation less often than Python does by default."""

from __future__ import annotations

import gc

from gateway.process.service import GC_THRESHOLDS, tune_garbage_collector


def test_the_startup_heap_is_frozen_and_the_thresholds_raised() -> None:
    """What the process holds once started (here: the test process with the gateway
    imported, tens of thousands of objects) is frozen: no full collection walks it again.
    A reply's objects, alive for a second or two, are not moved to the old generation
    within a fifth of a second, as they were at Python's thresholds. The collector, off
    while the command loaded (`gateway/operator/__main__.py`), is on again."""
    before = gc.get_threshold()
    gc.disable()
    try:
        tune_garbage_collector()
        assert gc.isenabled()
        assert gc.get_freeze_count() > 10_000
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > before[0]
    finally:
        gc.unfreeze()  # the test process goes on collecting everything, as it did
        gc.set_threshold(*before)
        gc.enable()
