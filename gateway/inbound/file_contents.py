"""What a model can take from a file's bytes: an image it can look at, or text it can read.

Three kinds, each checked against the bytes, never against what the upload claimed:
- images (png, jpeg, gif, webp, told apart by their magic bytes) are decoded by Pillow,
  so a truncated or disguised file never reaches a provider (which would refuse the
  whole request, in this round and every later one of the thread), and scaled down when
  over what the providers take: longest side 1568 px, 3.75 MB;
- text is the bytes decoded as UTF-8 (a BOM is dropped), nothing else;
- PDFs are their text layer, as `pypdf` extracts it, from the first `MAX_PDF_PAGES`
  pages; a scan without one has no text to give.

Everything here is CPU work on untrusted bytes: the caller runs it off the event loop
(`asyncio.to_thread`) under its deadline. Pillow and pypdf are the well-kept libraries
for these formats; writing our own decoders would be the riskier choice.
"""

from __future__ import annotations

import io
import logging
from typing import Literal, TypeAlias

import pypdf
from PIL import Image as PILImage
from PIL import UnidentifiedImageError

from agent import Image, storable_text
from gateway.inbound.files import NotRead

Kind: TypeAlias = Literal["image", "text", "pdf"]

# The providers' limits for one image: Anthropic scales anything longer than 1568 px
# down anyway (and refuses more than 5 MB of base64, i.e. ~3.75 MB of bytes).
MAX_SIDE = 1568
MAX_IMAGE_BYTES = 3_750_000
# More pixels than this is a decompression bomb, not a screenshot (8K is 33 Mpx).
MAX_PIXELS = 50_000_000
MAX_PDF_PAGES = 50

_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
_PIL_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}

NOT_AN_IMAGE = "not a readable image"
NOT_TEXT = "not text (not UTF-8)"
NOT_A_PDF = "not a readable PDF"
NO_TEXT_LAYER = "no text layer"

# pypdf reports every oddity of a damaged file on its logger; one file is not news.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def image_type(data: bytes) -> str | None:
    """The image type the bytes are (png, jpeg, gif, webp), whatever the upload said."""
    for magic, media_type in _MAGIC:
        if data.startswith(magic):
            return media_type
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def read_image(data: bytes, name: str) -> Image:
    """The picture as a provider takes it: checked, and scaled down when over the limits."""
    media_type = image_type(data)
    if media_type is None:
        raise NotRead(NOT_AN_IMAGE)
    try:
        with PILImage.open(io.BytesIO(data)) as picture:
            width, height = picture.size
            if width * height > MAX_PIXELS:
                raise NotRead(NOT_AN_IMAGE)
            if max(width, height) <= MAX_SIDE and len(data) <= MAX_IMAGE_BYTES:
                picture.verify()  # a truncated or corrupt file fails here, not at the provider
                return Image(media_type, data, name)
            return _scaled(picture, name)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise NotRead(NOT_AN_IMAGE) from exc


def _scaled(picture: PILImage.Image, name: str) -> Image:
    """Fit within MAX_SIDE; PNG where there is transparency, else (or when still too big)
    JPEG. An animated GIF keeps its first frame."""
    picture.thumbnail((MAX_SIDE, MAX_SIDE))
    transparent = picture.mode in ("RGBA", "LA") or "transparency" in picture.info
    if transparent:
        png = _encode(picture.convert("RGBA"), "PNG")
        if len(png) <= MAX_IMAGE_BYTES:
            return Image("image/png", png, name)
    for quality in (85, 70, 50):
        jpeg = _encode(picture.convert("RGB"), "JPEG", quality=quality)
        if len(jpeg) <= MAX_IMAGE_BYTES:
            return Image("image/jpeg", jpeg, name)
    raise NotRead(NOT_AN_IMAGE)  # 1568 px at quality 50 is well under 3.75 MB: unreachable


def _encode(picture: PILImage.Image, image_format: str, **options: int) -> bytes:
    out = io.BytesIO()
    picture.save(out, image_format, **options)
    return out.getvalue()


def read_text(data: bytes) -> str:
    """The bytes as text, if they are UTF-8; storable in Postgres (NUL replaced)."""
    try:
        return storable_text(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise NotRead(NOT_TEXT) from exc


def read_pdf(data: bytes) -> str:
    """The text layer of the first MAX_PDF_PAGES pages."""
    if not data.startswith(b"%PDF-"):
        raise NotRead(NOT_A_PDF)
    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        pages = [page.extract_text() or "" for page in reader.pages[:MAX_PDF_PAGES]]
    except Exception as exc:  # pypdf raises many kinds on damaged or encrypted files
        raise NotRead(NOT_A_PDF) from exc
    text = storable_text("\n\n".join(p.strip() for p in pages if p.strip()))
    if not text.strip():
        raise NotRead(NO_TEXT_LAYER)
    return text
