"""A pre-loaded interpreter that forks the `threadgate` commands the suite runs.

Every `threadgate serve` the suite started imported about 1,200 modules before it could
listen, about two seconds of CPU on the two-core machine CI runs on, and a run starts
about 135 gateways and 100 other commands: more than half of the suite's CPU went into
loading the same code again. This process loads it once per test worker and forks a
child for each command, as a pre-forking server does.

A child is a real process: its own pid, signals, exit status, file descriptors,
environment and working directory, running the real `python -m gateway.operator` entry
with the arguments the test gave. What it skips is loading the modules `serve` loads
(which it would have loaded the same way). Tests about the start itself (which modules a
command loads) start an interpreter of their own (tests/gateway/test_lazy_imports.py).

The suite's fake MCP server is forked the same way, from a zygote of its own
(tests/fakes/mcp_launch.py), a gateway spawning it as a stdio server: loading the MCP SDK
took about a second and a half each time.

Run as `python tests/gateway/zygote.py SOCKET MODULE [PRELOAD...]`, by
tests/gateway/forked.py, in the folder `python -m MODULE` would run in and with the
environment a child starts from (the socket guard on PYTHONPATH, so every child has it).
It loads PRELOAD, writes `ready` on its standard output once it listens, and exits when
its standard input closes (the test worker ended). Each connection to SOCKET asks for one
child, `python -m MODULE ARGS`:

    client → three file descriptors (the child's stdin, stdout, stderr) with one byte,
             then one JSON line: {"args": [...], "env": {...}, "cwd": "...", "watch": PID}
             (`watch`, optional: the child exits when process PID does)
    zygote → the child's pid, a line; then its exit status, a line (negative: the signal
             that ended it, as `subprocess` says), and closes.

Standard library only, and nothing from tests/: the zygote is not a test module.
"""

from __future__ import annotations

import sys

del sys.path[0]  # this script's folder (tests/gateway) is not for the commands to import

import atexit  # noqa: E402 - after the path is fixed
import contextlib  # noqa: E402
import gc  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import select  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import threading  # noqa: E402
import traceback  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.getcwd())  # as `python -m` puts it


def main(path: str, module: str, preload: list[str]) -> None:
    gc.disable()
    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # what was loaded stays shared with every child, unwalked by its collector
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wake-up fd is written
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_read, selectors.EVENT_READ, "reap")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    try:
        _serve(listener, selector, (wake_read, wake_write), children, module)
    finally:  # the socket's folder is the zygote's own (tests/gateway/forked.py made it)
        os.unlink(path)
        os.rmdir(os.path.dirname(path))


def _serve(
    listener: socket.socket,
    selector: selectors.BaseSelector,
    wake: tuple[int, int],
    children: dict[int, socket.socket],
    module: str,
) -> None:
    wake_read, wake_write = wake
    while True:
        for key, _ in selector.select():
            if key.data == "accept":
                conn, _ = listener.accept()
                owned = (listener, selector, wake_read, wake_write, *children.values())
                _start(conn, owned, children, module)
            elif key.data == "reap":
                os.read(wake_read, 4096)
                _reap(children)
            elif not os.read(sys.stdin.fileno(), 4096):
                return  # the test worker is gone


def _start(
    conn: socket.socket,
    owned: tuple[Any, ...],
    children: dict[int, socket.socket],
    module: str,
) -> None:
    try:
        _, fds, _, _ = socket.recv_fds(conn, 1, 3)
        request = json.loads(conn.makefile("rb").readline())
    except (OSError, ValueError):
        conn.close()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(module, request, fds, (conn, *owned))
    for fd in fds:
        os.close(fd)
    children[pid] = conn
    with contextlib.suppress(OSError):  # the test stopped waiting: the child runs all the same
        conn.sendall(b"%d\n" % pid)


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(b"%d\n" % os.waitstatus_to_exitcode(status))
            conn.close()


def _child(module: str, request: dict[str, Any], fds: list[int], owned: tuple[Any, ...]) -> None:
    """Become `python -m MODULE ARGS` in the request's environment and folder,
    with its three descriptors as stdin, stdout and stderr; never returns (whatever goes
    wrong, the child exits here rather than going back into the zygote's loop)."""
    code = 1
    try:
        _become(request, fds, owned)
        if "watch" in request:
            _exit_with(request["watch"])
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit:
        code = _exit_code(exit.code)
    except BaseException:  # what the interpreter does with an exception nobody caught
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _become(request: dict[str, Any], fds: list[int], owned: tuple[Any, ...]) -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for thing in owned:
        if isinstance(thing, int):
            os.close(thing)
        else:
            thing.close()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.path[0] = os.getcwd()  # the child's folder where the zygote's was, as `-m` puts it
    sys.argv = ["-m", *request["args"]]


def _exit_with(pid: int) -> None:
    """End this child the moment process `pid` ends (a launcher killed with SIGKILL cannot
    pass the signal on: tests/fakes/mcp_launch.py)."""
    watched = os.pidfd_open(pid)

    def watch() -> None:
        select.select([watched], [], [])
        os._exit(1)

    threading.Thread(target=watch, name="zygote-watch", daemon=True).start()


def _exit_code(code: object) -> int:
    """The status `sys.exit(code)` gives a process: an int as is, None 0, anything else
    printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
