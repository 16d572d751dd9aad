"""Regenerating BENCHMARKS.md keeps the sections `bench/report.py` does not write."""

from __future__ import annotations

from pathlib import Path

from bench.report import _title, keep_hand_written, sections

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def test_every_section_survives_a_rendering_that_lacks_it() -> None:
    """A section the rendering has no section of that title for is kept, in its place."""
    now = BENCHMARKS.read_text()
    parts = sections(now)
    dropped = {_title(part) for part in parts[2::3]}  # every third section, hand-written
    rendered = "".join(part for part in parts if _title(part) not in dropped)
    again = keep_hand_written(rendered, now)
    assert [_title(part) for part in sections(again)] == [_title(part) for part in parts]


def test_a_rendered_section_replaces_the_one_before() -> None:
    """A section the rendering writes is the rendering's, not the old text."""
    before = "# B\n\n## Summary\n\nold\n\n## Crafted files\n\nby hand\n"
    again = keep_hand_written("# B\n\n## Summary\n\nnew\n", before)
    assert again == "# B\n\n## Summary\n\nnew\n\n## Crafted files\n\nby hand\n"
