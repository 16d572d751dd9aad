"""Files crafted to cost a reader far more than their size, built here rather than kept as
binaries, so what each one declares stays readable:

- `png_bomb`: a valid PNG whose header declares 7000×7000 RGB pixels (147 MB decoded)
  and whose one IDAT chunk is zeros compressed to about 140 KB; under the 50 Mpx pixel
  cap, so only its decoded size gives it away;
- `pdf_bomb`: a valid PDF of 50 pages that all draw the same FlateDecode content stream,
  900,000 empty text operators `() Tj` (5.4 MB inflated, about 18 KB on disk), just
  under pypdf's budget of 2 million tokens per stream: about 18 s of pypdf's CPU per
  page on a loaded machine, every page parsed anew (a quarter of an hour for the 50),
  and no text, so no cap on extracted text stops it early.
"""

from __future__ import annotations

import struct
import zlib


def png_bomb(width: int = 7000, height: int = 7000) -> bytes:
    compressor = zlib.compressobj(9)
    row = b"\x00" * (1 + 3 * width)  # filter byte "none", then black RGB pixels
    idat = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    chunks = _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + chunks


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def pdf_bomb(pages: int = 50, operators: int = 900_000) -> bytes:
    stream = zlib.compress(b"BT /F1 1 Tf " + b"() Tj " * operators + b"ET", 9)
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R"
        b" /Resources << /Font << /F1 " + font + b" >> >> >>"
    )
    kids = b" ".join(b"%d 0 R" % (4 + n) for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        *([page] * pages),
    ]
    return pdf_of(objects)


def pdf_of(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (numbered from 1, the first the catalog), with its xref table."""
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n"
    return out + trailer % (len(objects) + 1, xref)
