"""A message's files as the model gets them: pictures beside the turn, text inside it.

For each file Slack describes (`SharedFile`; one it gives only by id is described by
`files.info` first, `gateway.slack.file_info`) the reader decides its kind from what Slack
says (mimetype, filetype), skips kinds the operator did not allow
(`THREADGATE_FILE_TYPES`), downloads it (`gateway.inbound.files`) and checks the bytes
(`gateway.inbound.file_contents`): text here, images and PDFs in a decoder process
(`gateway.inbound.decoders`), bounded in memory and CPU and killed at the deadline. What
comes of it:

- a picture becomes an `agent.Image`, stored with the turn and sent to the model beside
  its text; the turn names it (`[image "name" (type, size): attached]`);
- a PDF, with `documents` on (some route reads documents natively), is also kept as an
  `agent.Document` — bounded like one request's documents: at most
  `MAX_DOCUMENT_PAGES_PER_REQUEST` pages and `MAX_DOCUMENT_BYTES_PER_REQUEST` bytes — stored
  with the turn and sent beside it to those models, which read its pages as they look; a
  scan with no text layer is then read too, its turn naming it (`[document "name" (type,
  size): attached]`) where it would otherwise say "not read: no text layer". Its text
  layer stays in the turn, for the models that read no documents, and the document keeps
  that block exactly as the rendered turn has it (`Document.in_turn`, `documents_of`): a
  request that carries the PDF leaves the block out, so a model reads the PDF once, never
  as text and as a document; it keeps each page's text too (`Document.page_texts`);
- text (text files, code, Markdown, CSV, JSON; a PDF's text layer) goes into the turn,
  after the sender's words, in a labelled block: `[file "name" (type, size)]`, the text,
  `[end of file "name"]`. It is the sender's text like their words: the provenance tag
  escapes it with the body, so a file holding `</turn>` or a look-alike cannot close the
  turn or open another. (It can imitate the end of its own block; what follows is still
  inside the sender's turn, in their name.) All files of one message share
  `MAX_TEXT_CHARS` of text; the rest is cut, and the turn says so;
- anything else — a kind not allowed, a file over the size cap, a failed or late
  download, a file whose bytes are not what it claimed, one too large once decoded or
  too slow to read — is listed as not read, with the reason, so the reply can say so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from agent import (
    MAX_DOCUMENT_BYTES_PER_REQUEST,
    MAX_DOCUMENT_PAGES_PER_REQUEST,
    Document,
    Image,
    storable_text,
)
from gateway.inbound.decoders import Decoders
from gateway.inbound.files import FileDownloader
from gateway.inbound.reasons import (
    DOWNLOAD_FAILED,
    NO_TEXT_LAYER,
    NOT_DESCRIBED,
    NOT_TEXT,
    OUT_OF_TIME,
    NotRead,
)
from gateway.slack.events import SharedFile
from gateway.slack.file_info import FileInfo
from gateway.text.markup import clean_text

log = logging.getLogger(__name__)

Kind: TypeAlias = Literal["image", "text", "pdf"]

# Extracted text for one message, all its files together: about 5,000 tokens. More would
# crowd the conversation out of the history window (THREADGATE_HISTORY_CHARS).
MAX_TEXT_CHARS = 20_000
# A file name is the sender's text; one longer than this is cut (Slack allows 255 bytes).
MAX_FILE_NAME = 255
# A type as Slack writes it ("application/pdf", "pdf", "Plain Text"); anything else is
# not shown, since it is not quoted like a name is.
_FILE_KIND = re.compile(r"[\w .+/-]{1,100}")

TYPE_NOT_ALLOWED = "type not allowed"
NO_URL = "not available to the bot"
OVER_TEXT_LIMIT = "over the text limit for one message"

_IMAGE_FILETYPES = frozenset({"png", "jpg", "jpeg", "gif", "webp"})
_TEXT_MIMETYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-javascript",
        "application/typescript",
        "application/x-sh",
        "application/x-python",
        "application/sql",
        "application/csv",
        "application/x-ndjson",
    }
)
# Slack's `filetype` for text and source code (its snippet languages among them).
_TEXT_FILETYPES = frozenset(
    {
        "text",
        "markdown",
        "csv",
        "tsv",
        "json",
        "xml",
        "yaml",
        "toml",
        "ini",
        "log",
        "diff",
        "patch",
        "python",
        "javascript",
        "typescript",
        "jsx",
        "tsx",
        "java",
        "kotlin",
        "scala",
        "groovy",
        "c",
        "cpp",
        "csharp",
        "objc",
        "go",
        "rust",
        "ruby",
        "php",
        "perl",
        "lua",
        "r",
        "swift",
        "dart",
        "elixir",
        "erlang",
        "haskell",
        "clojure",
        "ocaml",
        "fsharp",
        "shell",
        "powershell",
        "bat",
        "sql",
        "css",
        "scss",
        "sass",
        "less",
        "dockerfile",
        "makefile",
        "cmake",
        "gradle",
        "vb",
        "vbscript",
        "matlab",
        "latex",
        "tex",
        "apex",
        "graphql",
        "protobuf",
        "terraform",
        "hcl",
        "nginx",
    }
)


@dataclass(frozen=True, slots=True)
class FileContent:
    """One file after reading: its text, or its picture, or why it was not read; a PDF
    kept for the models that read documents has its `document` too."""

    shared: SharedFile
    text: str | None = None
    image: Image | None = None
    problem: str | None = None
    document: Document | None = None


def kind_of(shared: SharedFile) -> Kind | None:
    """The kind Slack's description says the file is; None for kinds we never read."""
    mimetype, filetype = shared.mimetype or "", shared.filetype or ""
    if mimetype.startswith("image/") or filetype in _IMAGE_FILETYPES:
        return "image"
    if mimetype == "application/pdf" or filetype == "pdf":
        return "pdf"
    if mimetype == "text/html" or filetype == "html":
        return None  # Slack serves it as an HTML page, which looks like its login page
    if mimetype.startswith("text/") or mimetype in _TEXT_MIMETYPES or filetype in _TEXT_FILETYPES:
        return "text"
    return None


class FileReader:
    """Reads the files of a message within the gatekeeper's deadline; `on_read` is told
    each file's kind (or "other") and outcome ("read", or the reason in snake_case)."""

    def __init__(
        self,
        downloader: FileDownloader,
        decoders: Decoders,
        token: str,
        kinds: frozenset[str],
        on_read: Callable[[str, str], None] = lambda kind, outcome: None,
        info: FileInfo | None = None,
        documents: bool = False,
    ) -> None:
        self._documents = documents  # keep PDFs themselves: some route reads documents
        self._downloader = downloader
        self._decoders = decoders
        self._info = info  # `files.info` for files Slack gives only by id
        self._token = token  # the bot token of the message's workspace
        self._kinds = kinds
        self._on_read = on_read

    async def read(self, files: Sequence[SharedFile], deadline: float) -> tuple[FileContent, ...]:
        """Every file's outcome, in order; all are fetched at once."""
        # Decoder processes start while the files download.
        decoded = [k for f in files if (k := kind_of(f)) in self._kinds and k != "text"]
        self._decoders.warm(len(decoded))
        return tuple(await asyncio.gather(*(self._counted(f, deadline) for f in files)))

    async def _counted(self, shared: SharedFile, deadline: float) -> FileContent:
        described = await self._described(shared, deadline)
        if described is None:
            content = FileContent(shared, problem=NOT_DESCRIBED)
        else:
            content = await self._read(described, deadline)
        outcome = _slug(content.problem) if content.problem else "read"
        self._on_read(kind_of(content.shared) or "other", outcome)
        return content

    async def _described(self, shared: SharedFile, deadline: float) -> SharedFile | None:
        """The file as Slack describes it, asked of `files.info` if the event gave only
        its id; None if Slack did not say."""
        if shared.info_id is None:
            return shared
        return None if self._info is None else await self._info.describe(shared, deadline)

    async def _read(self, shared: SharedFile, deadline: float) -> FileContent:
        kind = kind_of(shared)
        if kind is None or kind not in self._kinds:
            return FileContent(shared, problem=TYPE_NOT_ALLOWED)
        if shared.url is None:
            return FileContent(shared, problem=NO_URL)
        try:
            data = await self._downloader.download(
                shared.url, self._token, declared_size=shared.size, deadline=deadline
            )
            return await self._extract(shared, kind, data, deadline)
        except NotRead as exc:
            return FileContent(shared, problem=exc.reason)
        except TimeoutError:
            return FileContent(shared, problem=OUT_OF_TIME)
        except Exception:  # a file we could not read must never cost the message its answer
            log.warning("reading an attached file failed", exc_info=True)
            return FileContent(shared, problem=DOWNLOAD_FAILED)

    async def _extract(
        self, shared: SharedFile, kind: Kind, data: bytes, deadline: float
    ) -> FileContent:
        if kind == "text":
            async with asyncio.timeout_at(deadline):  # linear in bytes the download capped
                return FileContent(shared, text=await asyncio.to_thread(read_text, data))
        decoded = await self._decoders.decode(kind, data, deadline, max_chars=MAX_TEXT_CHARS)
        if decoded.media_type is not None:
            image = Image(decoded.media_type, decoded.data, shared.name or "")
            return FileContent(shared, image=image)
        text = storable_text(decoded.text or "")
        page_texts = tuple(storable_text(t) for t in decoded.page_texts)
        document = self._document(shared, data, decoded.pages, page_texts)
        if not text.strip() and document is None:
            raise NotRead(NO_TEXT_LAYER)
        return FileContent(shared, text=text if text.strip() else None, document=document)

    def _document(
        self, shared: SharedFile, data: bytes, pages: int, page_texts: tuple[str, ...]
    ) -> Document | None:
        """The PDF itself, when it is kept for the models that read documents and fits
        what one request may carry."""
        if not self._documents or not 0 < pages <= MAX_DOCUMENT_PAGES_PER_REQUEST:
            return None
        if len(data) > MAX_DOCUMENT_BYTES_PER_REQUEST:
            return None
        return Document(data, shared.name or "", pages, page_texts=page_texts)


def _slug(reason: str) -> str:
    """A reason as a metric label: "not text (not UTF-8)" is not_text_not_utf_8."""
    return re.sub(r"\W+", "_", reason).strip("_").lower()


def read_text(data: bytes) -> str:
    """The bytes as storable text, if they are UTF-8 (a BOM dropped)."""
    try:
        return storable_text(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise NotRead(NOT_TEXT) from exc


def unread(files: Sequence[SharedFile]) -> tuple[FileContent, ...]:
    """Files nobody tried to read (no reader: the console, a test): no reason given."""
    return tuple(FileContent(f) for f in files)


def images_of(
    contents: Sequence[FileContent], rendered: Callable[[str], str] | None = None
) -> tuple[Image | Document, ...]:
    """What is stored beside the turn, in file order: its pictures, and its PDFs kept as
    documents, each with the block of the turn that carries its text as `rendered` (the
    turn's rendering of a part of its body) makes it."""
    blocks = _blocks(contents)[0] if rendered is not None else {}
    kept: list[Image | Document] = []
    for index, content in enumerate(contents):
        if content.image is not None:
            kept.append(content.image)
        elif content.document is not None:
            block = blocks.get(index)
            in_turn = rendered(block) if rendered is not None and block else ""
            kept.append(replace(content.document, in_turn=in_turn))
    return tuple(kept)


def files_text(contents: Sequence[FileContent], more: int = 0) -> str:
    """What the turn says of its files, after the sender's words: each text in its block,
    each picture by name, then one note for the files not read (with `more` files Slack
    listed beyond those described)."""
    _, parts, not_read = _blocks(contents)
    note = files_note(not_read, more)
    return "\n\n".join(parts + ([note] if note else []))


def _blocks(
    contents: Sequence[FileContent],
) -> tuple[dict[int, str], list[str], list[FileContent]]:
    """What `files_text` says of each file: the text blocks by the file's index, every
    part in order, and the files not read."""
    blocks: dict[int, str] = {}
    parts: list[str] = []
    not_read: list[FileContent] = []
    budget = MAX_TEXT_CHARS
    for index, content in enumerate(contents):
        if content.image is not None:
            parts.append(f"[image {describe(content.shared)}: attached]")
        elif content.text is None and content.document is not None:  # a scan
            parts.append(f"[document {describe(content.shared)}: attached]")
        elif content.text is not None and budget > 0:
            blocks[index] = _text_block(content, budget)
            parts.append(blocks[index])
            budget -= len(content.text)
        elif content.text is not None:
            not_read.append(FileContent(content.shared, problem=OVER_TEXT_LIMIT))
        else:
            not_read.append(content)
    return blocks, parts, not_read


def _text_block(content: FileContent, budget: int) -> str:
    text = content.text or ""
    shown = text[:budget]
    cut = len(text) - len(shown)
    tail = f"\n[… {cut:,} more characters not shown: {OVER_TEXT_LIMIT}]" if cut else ""
    return (
        f"[file {describe(content.shared)}]\n{shown}{tail}\n"
        f"[end of file {_quoted_name(content.shared)}]"
    )


def files_note(files: Sequence[FileContent], more: int = 0) -> str:
    """What the model is told about files it cannot see: which files (name, type, size),
    that they were not read, and why when the reader said. Names are quoted as JSON
    strings, so no name can end the list or pass for another file; the provenance tag
    escapes the whole note with the body."""
    count = len(files) + more
    if not count:
        return ""
    described = [_why(f) for f in files] + ([f"{more} more"] if more else [])
    which = "1 file" if count == 1 else f"{count} files"
    its = "its" if count == 1 else "their"
    return f"[{which} attached, not read (you cannot see {its} content): {'; '.join(described)}]"


def _why(content: FileContent) -> str:
    shown = describe(content.shared)
    return f"{shown}: {content.problem}" if content.problem else shown


def describe(shared: SharedFile) -> str:
    """`"name" (type, size)`: the name quoted, the type only if it looks like one."""
    kind = shared.kind if shared.kind and _FILE_KIND.fullmatch(shared.kind) else None
    details = [kind or "type unknown"]
    if shared.size is not None:
        details.append(f"{shared.size:,} bytes")
    return f"{_quoted_name(shared)} ({', '.join(details)})"


def _quoted_name(shared: SharedFile) -> str:
    if not shared.name:
        return "a file without a name"
    return json.dumps(clean_text(shared.name[:MAX_FILE_NAME]), ensure_ascii=False)
