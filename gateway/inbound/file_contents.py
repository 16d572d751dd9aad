"""What a model can take from an image's or a PDF's bytes: a picture, or the PDF's text.

Each is checked against the bytes, never against what the upload claimed (text files are
`attachments.read_text`'s):
- images (png, jpeg, gif, webp, told apart by their magic bytes) are decoded by Pillow,
  so a truncated or disguised file never reaches a provider (which would refuse the
  whole request, in this round and every later one of the thread), and scaled down when
  over what the providers take: longest side 1568 px, 3.75 MB;
- PDFs are their text layer, as `pypdf` extracts it, from the first `MAX_PDF_PAGES`
  pages, until as much of it is read as the turn can show, and their page count; a scan
  has no text to give (`read_pdf_pages` then gives "": the PDF itself may still go to a
  model that reads documents, gateway/inbound/attachments.py). The text of each page read
  comes too (`PdfText.page_texts`), within the same bound: a quote cited from a page is
  checked against it.

What an image costs is decided from its header, before a pixel is decoded: its decoded
size (width × height × bands bytes) must fit `MAX_DECODED_BYTES`. A PNG of a few hundred
kilobytes can declare 7000×7000 pixels, 147 MB decoded; its pixel count alone would pass.
A JPEG is first asked for a reduced decode (`draft`), which is what the providers get
anyway. Pillow's own decompression-bomb check is an error here, never a warning.

Images and PDFs are CPU work on untrusted bytes, and a PDF's cost is not known before it
is parsed (pages may share one content stream that inflates to megabytes): they run in
the decoder processes (`gateway.inbound.decoders`), under memory and CPU limits and
killed at the deadline. Text is linear in its bytes (capped by the download) and is read
in the gateway. This module imports neither `agent` nor the rest of the gateway, so a
decoder process starts in a fraction of a second. Pillow and pypdf are the well-kept
libraries for these formats; writing our own decoders would be the riskier choice.
"""

from __future__ import annotations

import io
import logging
import warnings
from dataclasses import dataclass

import pypdf
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from gateway.inbound.reasons import (
    NO_TEXT_LAYER,
    NOT_A_PDF,
    NOT_AN_IMAGE,
    TOO_LARGE_DECODED,
    NotRead,
)

# The providers' limits for one image: Anthropic scales anything longer than 1568 px
# down anyway (and refuses more than 5 MB of base64, i.e. ~3.75 MB of bytes).
MAX_SIDE = 1568
MAX_IMAGE_BYTES = 3_750_000
# The most one image may take once decoded: an 8K screenshot (7680×4320 RGB) is 99.5 MB.
MAX_DECODED_BYTES = 100_000_000
# More pixels than this is a bomb whatever its bands (8K is 33 Mpx); Pillow refuses it.
MAX_PIXELS = 50_000_000
MAX_PDF_PAGES = 50

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
# Bytes per band of the modes wider than one byte; every other mode takes one.
_BAND_BYTES = {"I": 4, "F": 4, "I;16": 2, "I;16B": 2, "I;16L": 2, "I;16N": 2}

# pypdf reports every oddity of a damaged file on its logger; one file is not news.
logging.getLogger("pypdf").setLevel(logging.ERROR)
PILImage.MAX_IMAGE_PIXELS = MAX_PIXELS


@dataclass(frozen=True, slots=True)
class Picture:
    """An image as a provider takes it: its type (from its bytes) and its bytes."""

    media_type: str
    data: bytes


def image_type(data: bytes) -> str | None:
    """The image type the bytes are (png, jpeg, gif, webp), whatever the upload said."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(data: bytes) -> Picture:
    """The picture as a provider takes it: checked, and scaled down when over the limits."""
    media_type = image_type(data)
    if media_type is None:
        raise NotRead(NOT_AN_IMAGE)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as picture:
                return _checked(picture, media_type, data)
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning) as exc:
        raise NotRead(TOO_LARGE_DECODED) from exc
    except MemoryError as exc:
        raise NotRead(TOO_LARGE_DECODED) from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise NotRead(NOT_AN_IMAGE) from exc


def _checked(picture: PILImage.Image, media_type: str, data: bytes) -> Picture:
    width, height = picture.size
    if max(width, height) <= MAX_SIDE and len(data) <= MAX_IMAGE_BYTES:
        _within_budget(picture)
        picture.verify()  # a truncated or corrupt file fails here, not at the provider
        return Picture(media_type, data)
    if picture.format == "JPEG":
        picture.draft("RGB", (MAX_SIDE, MAX_SIDE))  # decode at 1/2, 1/4 or 1/8 scale
    _within_budget(picture)
    return _scaled(picture)


def decoded_bytes(picture: PILImage.Image) -> int:
    """What decoding the picture would take: width × height × bands × bytes per band."""
    width, height = picture.size
    return width * height * len(picture.getbands()) * _BAND_BYTES.get(picture.mode, 1)


def _within_budget(picture: PILImage.Image) -> None:
    if decoded_bytes(picture) > MAX_DECODED_BYTES:
        raise NotRead(TOO_LARGE_DECODED)


def _scaled(picture: PILImage.Image) -> Picture:
    """Fit within MAX_SIDE; PNG where there is transparency, else (or when still too big)
    JPEG. An animated GIF keeps its first frame."""
    picture.thumbnail((MAX_SIDE, MAX_SIDE))
    transparent = picture.mode in ("RGBA", "LA") or "transparency" in picture.info
    if transparent:
        png = _encode(picture.convert("RGBA"), "PNG")
        if len(png) <= MAX_IMAGE_BYTES:
            return Picture("image/png", png)
    for quality in (85, 70, 50):
        jpeg = _encode(picture.convert("RGB"), "JPEG", quality=quality)
        if len(jpeg) <= MAX_IMAGE_BYTES:
            return Picture("image/jpeg", jpeg)
    raise NotRead(NOT_AN_IMAGE)  # 1568 px at quality 50 is well under 3.75 MB: unreachable


def _encode(picture: PILImage.Image, image_format: str, **options: int) -> bytes:
    out = io.BytesIO()
    picture.save(out, image_format, **options)
    return out.getvalue()


@dataclass(frozen=True, slots=True)
class PdfText:
    """A PDF's text layer ("" for a scan), its page count, and the text of each page read
    ("" for a page without text), in order."""

    text: str
    pages: int
    page_texts: tuple[str, ...] = ()


def read_pdf(data: bytes, max_chars: int) -> str:
    """The text layer of the first MAX_PDF_PAGES pages; extraction stops at the first page
    that brings it past `max_chars` (what the turn can show), and the text is cut at twice
    that (the turn counts what it does not show). A PDF without one is `NotRead`."""
    text = read_pdf_pages(data, max_chars).text
    if not text.strip():
        raise NotRead(NO_TEXT_LAYER)
    return text


def read_pdf_pages(data: bytes, max_chars: int) -> PdfText:
    """`read_pdf`'s text ("" for a scan), the PDF's page count and its pages' text."""
    if not data.startswith(b"%PDF-"):
        raise NotRead(NOT_A_PDF)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        page_texts = _page_texts(reader, max_chars)
        text = "\n\n".join(t for t in page_texts if t)[: 2 * max_chars]
        return PdfText(text, len(reader.pages), page_texts)
    except MemoryError as exc:
        raise NotRead(TOO_LARGE_DECODED) from exc
    except Exception as exc:  # pypdf raises many kinds on damaged or encrypted files
        raise NotRead(NOT_A_PDF) from exc


def _page_texts(reader: pypdf.PdfReader, max_chars: int) -> tuple[str, ...]:
    """Each page's text until the first page past `max_chars`, all of it within twice
    that (the last page read cut to fit)."""
    pages: list[str] = []
    read = 0
    for page in reader.pages[:MAX_PDF_PAGES]:
        text = (page.extract_text() or "").strip()[: 2 * max_chars - read]
        pages.append(text)
        read += len(text)
        if read > max_chars:
            break
    return tuple(pages)
