"""`make bench`: every benchmark, one after another."""

from __future__ import annotations

import asyncio

from bench import ack_latency, stream_parse

if __name__ == "__main__":
    stream_parse.main()
    asyncio.run(ack_latency.main())
