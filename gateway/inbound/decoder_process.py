"""A decoder process: reads images and PDFs (`gateway.inbound.file_contents`) for the
gateway, one at a time, under the limits the gateway gave it.

Started by `gateway.inbound.decoders` as `python -m gateway.inbound.decoder_process
MEMORY_BYTES`, it talks frames on its stdin and stdout (`FRAME_HEADER`: the lengths of a
JSON header and of the bytes that follow it): a request
is `{"kind", "cpu_seconds", "max_chars"}` and the file's bytes; a reply `{"problem"}`,
`{"text", "pages", "page_texts"}` or
`{"media_type"}` with the picture's bytes. Before each request its CPU limit
(RLIMIT_CPU) is set to the seconds the gateway allows from what it used so far, so a
runaway decode is stopped by the kernel (SIGXCPU) even if the gateway were not there to
kill it; its address space (RLIMIT_AS) is capped once, after the imports, and no core is
written (RLIMIT_CORE 0). A decode that ran out of memory leaves the process in no state
to trust: it answers, then exits, and the gateway starts another.
"""

from __future__ import annotations

import json
import logging
import math
import os
import resource
import struct
import sys
from types import ModuleType
from typing import Any, BinaryIO

from gateway.inbound.reasons import DECODER_FAILED, TOO_LARGE_DECODED, NotRead

log = logging.getLogger("threadgate.decoder")

READY = b"threadgate decoder ready\n"
FRAME_HEADER = struct.Struct(">II")  # the JSON header's length, then the bytes'


def main() -> None:
    # Imported here, not above: the gateway imports this module for the frames' shape.
    from gateway.inbound import file_contents

    memory_bytes = int(sys.argv[1])
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_AS, memory_bytes)
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print from a library goes to the log, not into a frame
    channel.write(READY)
    channel.flush()
    while (request := read_frame(sys.stdin.buffer)) is not None:
        header, data = request
        _limit_cpu(float(header.get("cpu_seconds", 1)))
        reply, body, retire = _decode(file_contents, header, data)
        write_frame(channel, reply | ({"retiring": True} if retire else {}), body)
        if retire:
            return


def _decode(
    file_contents: ModuleType, request: dict[str, Any], data: bytes
) -> tuple[dict[str, Any], bytes, bool]:
    """The reply, its bytes, and whether this process should exit after sending it."""
    kind = request.get("kind")
    try:
        if kind == "image":
            picture = file_contents.read_image(data)
            return {"media_type": picture.media_type}, picture.data, False
        if kind == "pdf":
            read = file_contents.read_pdf_pages(data, int(request["max_chars"]))
            reply = {"text": read.text, "pages": read.pages, "page_texts": list(read.page_texts)}
            return reply, b"", False
        return {"problem": DECODER_FAILED}, b"", False
    except NotRead as exc:
        return {"problem": exc.reason}, b"", isinstance(exc.__cause__, MemoryError)
    except MemoryError:
        return {"problem": TOO_LARGE_DECODED}, b"", True
    except Exception:
        log.warning("decoding an attached %s failed", kind, exc_info=True)
        return {"problem": DECODER_FAILED}, b"", True


def write_frame(stream: BinaryIO, header: dict[str, Any], data: bytes = b"") -> None:
    encoded = json.dumps(header).encode()
    stream.write(FRAME_HEADER.pack(len(encoded), len(data)) + encoded + data)
    stream.flush()


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], bytes] | None:
    """The next frame, None at the end of the stream (the gateway closed it)."""
    head = stream.read(FRAME_HEADER.size)
    if len(head) < FRAME_HEADER.size:
        return None
    header_length, data_length = FRAME_HEADER.unpack(head)
    header = json.loads(stream.read(header_length))
    return header, stream.read(data_length)


def _limit(which: int, soft: int) -> None:
    """Lower the limit to `soft` (and its hard limit with it: no way back up)."""
    _, hard = resource.getrlimit(which)
    value = soft if hard == resource.RLIM_INFINITY else min(soft, hard)
    resource.setrlimit(which, (value, value))


def _limit_cpu(seconds: float) -> None:
    """Allow `seconds` more of CPU from now (whole seconds, the kernel's unit)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime + max(seconds, 1.0))
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


if __name__ == "__main__":
    main()
