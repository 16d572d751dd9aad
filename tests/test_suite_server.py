"""The suite's embedded server starts each run empty: the last run's databases are moved
aside and deleted in the background, unless another run is using the server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.pg import clear_previous_run


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _data_dir(tmp_path: Path, pid: int) -> Path:
    pgdata = tmp_path / "pgdata"
    (pgdata / "base" / "12345").mkdir(parents=True)
    (pgdata / "base" / "12345" / "1259").write_bytes(b"x" * 8192)
    (pgdata / "postmaster.pid").write_text(f"{pid}\n{pgdata}\n")
    return tmp_path


def test_a_stopped_servers_databases_are_deleted_in_the_background(tmp_path: Path) -> None:
    """A data directory whose server has stopped is moved aside at once and then deleted,
    so the next run's server is made anew and the disk does not fill run after run."""
    data_dir = _data_dir(tmp_path, _dead_pid())
    removal = clear_previous_run(data_dir)
    assert not (data_dir / "pgdata").exists() and removal is not None
    assert removal.wait(timeout=30) == 0
    assert list(data_dir.iterdir()) == []


def test_a_server_another_run_is_using_is_left_alone(tmp_path: Path) -> None:
    """While a live process holds the data directory (another run sharing the server),
    nothing of it is moved or deleted."""
    data_dir = _data_dir(tmp_path, os.getpid())
    assert clear_previous_run(data_dir) is None
    assert (data_dir / "pgdata" / "base" / "12345" / "1259").is_file()
    assert [p.name for p in data_dir.iterdir()] == ["pgdata"]
