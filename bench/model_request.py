"""Benchmark: the gateway's own CPU per streamed model request, against a checkout before.

A streamed OpenAI request the size of a round's (a ~28 KB body: a long system prompt and
the tools), answered by a loopback server in a process of its own with a short
`final_reply` stream, sent through the gateway's transport (gateway/models/transport.py)
with logging set up as `serve` sets it (INFO, text, stderr to a pipe the parent drains).
Only the measuring process's CPU is counted, so neither the server nor the machine's
other work is in the figure; what moves it is the host's speed, so the checkouts are
measured in alternating processes, and the ratio of each pair is the figure to read.

    .venv/bin/python -m bench.model_request [--code DIR] [--pairs 5] [--requests 600]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from bench import run as bench_run

HERE = Path(__file__).resolve().parent.parent
CONCURRENT = 16  # the default THREADGATE_WORKERS: requests in flight at once
TOOLS = 12


def _request():  # type: ignore[no-untyped-def]
    from agent.models.contract import ModelRequest, SystemMessage, ToolSpec, UserMessage

    tools = [
        ToolSpec(
            f"tool_{n}",
            "Look something up for the person who asked, and say where it came from. " * 6,
            {"type": "object", "properties": {"query": {"type": "string"}}},
        )
        for n in range(TOOLS)
    ]
    system = SystemMessage("You are a helpful assistant in a Slack workspace. " * 300)
    turns = [UserMessage(f'<turn from="U1" id="{n}">{"words " * 40}</turn>') for n in range(8)]
    return ModelRequest((system, *turns), tuple(tools), tool_choice="required")


async def serve() -> None:
    """The fake model, in this process: prints its URL, answers until stdin closes."""
    from tests.fakes.openai_api import OpenAIServer, reply_with_tool

    async with OpenAIServer() as model:
        model.default = lambda seen: reply_with_tool("final_reply", {"text": "re: " + "ok " * 30})
        print(model.url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


async def measure(url: str, requests: int) -> None:
    """Send `requests` streamed requests, CONCURRENT at a time; print CPU µs per request."""
    from pydantic import SecretStr

    from agent.models.providers.openai import OpenAIModel, OpenAIProvider
    from gateway.models.transport import model_transport
    from gateway.telemetry.logs import configure_logging

    configure_logging("INFO", "text")
    provider = OpenAIProvider(
        base_url=url, api_key=SecretStr("sk-bench"), transport=model_transport(url, 16)
    )
    model = OpenAIModel("gpt-bench", provider=provider, stream=True)
    request = _request()
    queue = asyncio.Semaphore(CONCURRENT)

    async def one() -> None:
        async with queue:
            await model.request(request)

    await asyncio.gather(*(one() for _ in range(CONCURRENT * 4)))  # warm-up
    started = time.process_time()
    await asyncio.gather(*(one() for _ in range(requests)))
    cpu = time.process_time() - started
    await model.aclose()
    print(json.dumps({"cpu_us_per_request": round(cpu / requests * 1e6, 1)}), flush=True)


async def child(args: list[str], cwd: Path) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.model_request", *args, cwd=cwd,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def one_side(url: str, cwd: Path, requests: int) -> float:
    proc = await child(["--measure", url, "--requests", str(requests)], cwd)
    assert proc.stderr is not None and proc.stdout is not None
    drained = asyncio.ensure_future(proc.stderr.read())  # the pipe `serve` logs into
    out = await proc.stdout.read()
    await proc.wait()
    await drained
    return float(json.loads(out.splitlines()[-1])["cpu_us_per_request"])


async def main(args: argparse.Namespace) -> None:
    here = HERE
    server = await child(["--serve"], here)
    assert server.stdout is not None and server.stdin is not None
    url = (await server.stdout.readline()).decode().strip()
    sides = [("after", here)] + ([("before", args.code)] if args.code else [])
    rows: list[dict[str, float]] = []
    try:
        for n in range(args.pairs):
            row = {}
            for name, cwd in sides if n % 2 == 0 else sides[::-1]:
                row[name] = await one_side(url, cwd, args.requests)
            print(f"  pair {n}: {json.dumps(row)}", flush=True)
            rows.append(row)
    finally:
        server.stdin.close()
        await server.wait()
    summary = {name: statistics.median(r[name] for r in rows) for name, _ in sides}
    if args.code:
        summary["after/before"] = statistics.median(r["after"] / r["before"] for r in rows)
    print(json.dumps(summary))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.model_request", description=__doc__)
    parser.add_argument("--code", type=Path, help="a checkout of the code before")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", metavar="URL", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.serve:
        bench_run(serve())
    elif ns.measure:
        bench_run(measure(ns.measure, ns.requests))
    else:
        bench_run(main(ns))
