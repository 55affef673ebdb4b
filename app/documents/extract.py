"""Text from an attached file: plain text (any encoding people use), PDF (pypdfium2, in a child process:
app/documents/pdf.py) and DOCX (python-docx).

Runs off the GUI thread (a worker or the loop's executor); never executes anything in the file
(pdfium without a form environment runs no JavaScript; python-docx's parser resolves no entities).
Bad input raises ChinwagError with one line naming the file.
"""

import hashlib
import io
import os
import re
import stat
import struct
import zipfile
import zlib
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.sizes import format_bytes
from app.documents import limits
from engine.atomic import describe_kind
from engine.errors import ChinwagError

Progress = Callable[[int, int], None] | None

# Leading bytes of formats that are not text: what to call them in the error.
_MAGIC = (
    (b"\x89PNG", "an image"),
    (b"\xff\xd8\xff", "an image"),
    (b"GIF8", "an image"),
    (b"II*\x00", "an image"),
    (b"MM\x00*", "an image"),
    (b"\xd0\xcf\x11\xe0", "an old Office file (.doc/.xls): save it as DOCX"),
    (b"\x7fELF", "a program"),
    (b"MZ", "a program"),
    (b"\x1f\x8b", "a compressed archive"),
    (b"7z\xbc\xaf", "a compressed archive"),
    (b"Rar!", "a compressed archive"),
    (b"ID3", "an audio file"),
    (b"OggS", "an audio file"),
    (b"fLaC", "an audio file"),
    (b"SQLite format 3", "a database"),
)
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".heic", ".heif", ".bmp", ".tif", ".tiff", ".ico"}
SUPPORTED = "Chinwag reads text, PDF and DOCX"


@dataclass(frozen=True)
class Extracted:
    """A document's text and what identifies it (stored with the message by app/core/store.py)."""

    name: str
    kind: str  # "text", "pdf" or "docx"
    size: int  # bytes of the original
    sha256: str
    text: str
    pages: int = 0  # PDFs only
    original: bytes = field(default=b"", repr=False, compare=False)


def read_bounded(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a regular file, refusing anything else before reading (FIFOs and devices never block)."""
    name = Path(path).name or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ChinwagError(f"{name} is gone: it was moved or deleted ({path})") from None
    except OSError as e:
        raise ChinwagError(f"cannot open {name}: {e.strerror or e} ({path})") from None
    except ValueError as e:  # a NUL byte in the name
        raise ChinwagError(f"cannot open {path!r}: {e}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ChinwagError(f"{name} is a folder: attach the files in it")
        if not stat.S_ISREG(info.st_mode):
            raise ChinwagError(f"{name} is {describe_kind(info.st_mode)}, not a file")
        if info.st_size > limits.MAX_FILE_BYTES:
            raise ChinwagError(
                f"{name} is too big to attach: {format_bytes(info.st_size)}, the limit is {format_bytes(limits.MAX_FILE_BYTES)}"
            )
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limits.MAX_FILE_BYTES:  # it grew while being read
                raise ChinwagError(f"{name} is too big to attach: the limit is {format_bytes(limits.MAX_FILE_BYTES)}")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise ChinwagError(f"cannot read {name}: {e.strerror or e}") from None
    finally:
        os.close(fd)


def extract(path: str | os.PathLike[str], progress: Progress = None) -> Extracted:
    """Read and extract one file; `progress(done, total)` is called per PDF page."""
    return extract_bytes(Path(path).name or str(path), read_bounded(path), progress)


def extract_bytes(name: str, data: bytes, progress: Progress = None) -> Extracted:
    if data.startswith(b"%PDF-") or (b"%PDF-" in data[:1024] and name.lower().endswith(".pdf")):
        kind, (text, pages) = "pdf", _pdf(name, data, progress)
    elif data.startswith(b"PK\x03\x04"):
        kind, text, pages = "docx", _docx(name, data), 0
    else:
        kind, text, pages = "text", _text(name, data), 0
    if len(text) > limits.MAX_TEXT_CHARS:
        raise ChinwagError(f"{name} holds too much text: more than {limits.MAX_TEXT_CHARS:,} characters")
    return Extracted(name, kind, len(data), hashlib.sha256(data).hexdigest(), text, pages, data)


# --- plain text --------------------------------------------------------------------------


def _text(name: str, data: bytes) -> str:
    if not data:
        raise ChinwagError(f"{name} is empty")
    for magic, what in _MAGIC:
        if data.startswith(magic):
            return _refuse(name, what)
    if data[8:12] == b"WEBP" or data[4:12] in (b"ftypheic", b"ftypheix", b"ftypmif1"):
        return _refuse(name, "an image")
    if Path(name).suffix.lower() in _IMAGE_SUFFIXES:
        return _refuse(name, "an image")
    if data.startswith(b"\xef\xbb\xbf"):
        text = _decoded(name, data[3:], "utf-8")
    elif data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = _decoded(name, data, "utf-16")
    elif b"\x00" in data[:8192]:
        encoding = _utf16_without_mark(data[:8192])
        if not encoding:
            return _refuse(name, "a binary file")
        text = _decoded(name, data, encoding)
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = data.decode("latin-1")  # every byte is a character: old Western files
            if _odd_share(text) > BINARY_SHARE:
                return _refuse(name, "a binary file")
    if not text.strip():
        raise ChinwagError(f"{name} has no text: it holds only spaces and line breaks")
    at = _binary_from(text)
    if at >= 0:
        raise ChinwagError(f"{name} holds binary data from character {at:,} on: {SUPPORTED}")
    return text.replace("\r\n", "\n")


# Past this share of odd characters (controls, unassigned, private use) in a file's first 8,192, it is binary.
BINARY_SHARE = 0.05
_ODD = frozenset(("Cc", "Cn", "Co", "Cs"))


def _decoded(name: str, data: bytes, encoding: str) -> str:
    """Text after a byte-order mark: the mark says nothing of what follows, so binary is still refused."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        if _odd_share(data[:16384].decode(encoding, "replace"), "\ufffd") > BINARY_SHARE:
            return _refuse(name, "a binary file")
        raise ChinwagError(f"{name} is not valid {encoding.upper()} (byte {e.start})") from None
    if _odd_share(text) > BINARY_SHARE:
        return _refuse(name, "a binary file")
    return text


def _utf16_without_mark(sample: bytes) -> str:
    """`utf-16-le` or `utf-16-be` when `sample` is mostly Latin text in UTF-16 with no byte-order mark (every
    other byte zero, the others not), else "" (its text is then still checked for binary)."""
    if len(sample) < 16:
        return ""
    even, odd = sample[0::2], sample[1::2]
    share = {half: half.count(0) / len(half) for half in (even, odd)}
    if share[odd] > 0.9 and share[even] < 0.01:
        return "utf-16-le"
    if share[even] > 0.9 and share[odd] < 0.01:
        return "utf-16-be"
    return ""


def _odd_share(text: str, also: str = "") -> float:
    """The share of characters no text holds in its first 8,192: controls but tab, line breaks and form
    feed, unassigned code points, private use, lone surrogates (and `also`)."""
    import unicodedata

    sample = text[:8192]
    odd = sum(1 for c in sample if c in also or (unicodedata.category(c) in _ODD and c not in "\t\n\r\f"))
    return odd / max(1, len(sample))


# What no text holds, found fast by a regex: controls but tab, line breaks and form feed; lone surrogates;
# private use; what the decoder put for a byte it could not read.
_ODD_FAST = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\ud800-\udfff\ue000-\uf8ff\ufffd]")
_WINDOW = 65_536


def _binary_from(text: str) -> int:
    """Where binary data starts in `text` (the first odd character of the first window of _WINDOW characters
    in which more than BINARY_SHARE are odd), or -1: the first 8,192 characters say nothing of the rest (64 KB of
    text and then megabytes of noise or zeros)."""
    for start in range(0, len(text), _WINDOW):
        window = text[start : start + _WINDOW]
        if len(_ODD_FAST.findall(window)) > BINARY_SHARE * len(window):
            first = _ODD_FAST.search(window)
            return start + (first.start() if first else 0)
    return -1


def _refuse(name: str, what: str) -> str:
    if what.startswith("an old"):
        raise ChinwagError(f"{name} is {what}")
    raise ChinwagError(f"{name} is {what}: {SUPPORTED}")


# --- PDF ---------------------------------------------------------------------------------


def _pdf(name: str, data: bytes, progress: Progress) -> tuple[str, int]:
    """Each page's text after a `[page N]` marker; pdfium runs in a child process under per-page bounds."""
    from app.documents.pdf import read_pages

    parts, size, seen = [], 0, False
    pages = read_pages(name, data, progress)
    for i, text in enumerate(pages):
        text = text.replace("\r\n", "\n").replace("\r", "\n").strip()
        seen = seen or bool(text)
        parts.append(f"[page {i + 1}]\n{text}")
        size += len(text)
        if size > limits.MAX_TEXT_CHARS:
            raise ChinwagError(f"{name} holds too much text: more than {limits.MAX_TEXT_CHARS:,} characters")
    if not seen:
        if not pages:
            raise ChinwagError(f"{name} has no pages")
        raise ChinwagError(f"{name} has no text: it is a scanned image")
    return "\n\n".join(parts), len(pages)


# --- DOCX --------------------------------------------------------------------------------


def _docx(name: str, data: bytes) -> str:
    _check_directory(name, data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError):
        raise ChinwagError(f"{name} is not a readable DOCX: it is damaged or incomplete") from None
    names = {m.filename for m in members}
    if "word/document.xml" not in names:
        what = "an Excel workbook" if "xl/workbook.xml" in names else "a ZIP archive"
        if "ppt/presentation.xml" in names:
            what = "a PowerPoint presentation"
        return _refuse(name, what)
    if len(members) > limits.MAX_DOCX_MEMBERS:
        raise ChinwagError(_too_many_members(name, len(members)))
    _check_members(name, members)
    declared = sum(m.file_size for m in members)
    if declared > limits.MAX_DOCX_UNCOMPRESSED:
        raise ChinwagError(f"{name} unpacks to {format_bytes(declared)}: too big to be a document (a zip bomb?)")
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from lxml import etree

    try:
        _check_parsing_cost(name, archive, members)
        lines = _docx_lines(docx.Document(io.BytesIO(data)))
    except ChinwagError:
        raise
    except (KeyError, ValueError, EOFError, zlib.error, zipfile.BadZipFile, etree.LxmlError, PackageNotFoundError):
        raise ChinwagError(f"{name} is not a readable DOCX: it is damaged or incomplete") from None
    text = "\n".join(lines).strip()
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    if not text:
        raise ChinwagError(f"{name} has no text")
    return text


def _docx_lines(document: Any) -> list[str]:
    """Paragraphs (headings as Markdown) and table rows, in document order."""
    from docx.table import Table

    styles, default_name = _paragraph_styles(document)
    lines = []
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            lines.extend(_table_rows(block))
            lines.append("")
            continue
        style_id = block._p.style
        style_name = styles.get(style_id, default_name) if style_id is not None else default_name
        lines.append(_markdown_line(block.text.strip(), style_name))
    return lines


def _table_rows(table: Any) -> list[str]:
    """Each row's cells' text joined by " | ", each cell once, its text in the first row it spans.

    Not python-docx's `row.cells`: it repeats a cell once per column it spans (a declared span of a billion
    is a billion cells) and finds a vertically merged cell's text by walking up the rows recursively
    (quadratic in the rows, and a RecursionError past a thousand)."""
    return [
        " | ".join("" if tc.vMerge == "continue" else _cell_text(tc, table) for tc in tr.tc_lst)
        for tr in table._tbl.tr_lst
    ]


def _cell_text(tc: Any, table: Any) -> str:
    """A cell's paragraphs at any depth, in order: a table inside the cell is read too (python-docx's
    `_Cell.text` reads only the cell's own paragraphs, and a nested table's text was lost)."""
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    return "\n".join(Paragraph(p, table).text for p in tc.iter(qn("w:p"))).strip()


def _paragraph_styles(document: Any) -> tuple[dict[str, str], str]:
    """Each style id's paragraph style name, and the default paragraph style's name.

    Found once per style (python-docx searches every style for each paragraph: a millisecond a
    paragraph). As python-docx: an unknown id, or one of another type, is the default style."""
    from docx.enum.style import WD_STYLE_TYPE

    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    default_name = (default.name if default is not None else "") or ""
    styles: dict[str, str] = {}
    for style in document.styles:
        if style.style_id not in styles:
            styles[style.style_id] = (style.name or "") if style.type == WD_STYLE_TYPE.PARAGRAPH else default_name
    return styles, default_name


def _markdown_line(text: str, style_name: str) -> str:
    """A paragraph's text, as a Markdown heading when its style is a heading or the title."""
    if text and style_name.startswith("Heading"):
        level = style_name.removeprefix("Heading").strip()
        return "#" * (int(level) if level.isdigit() else 1) + " " + text
    if text and style_name == "Title":
        return "# " + text
    return text


# The compression methods zipfile reads (stored, deflate, bzip2, LZMA); any other raises NotImplementedError.
_ZIP_METHODS = frozenset((zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA))


def _check_members(name: str, members: list[zipfile.ZipInfo]) -> None:
    """Members zipfile cannot open are the file's fault: an encrypted one, or one of another compression method."""
    for member in members:
        if member.flag_bits & 0x1:
            raise ChinwagError(f"{name} is password-protected")
        if member.compress_type not in _ZIP_METHODS:
            raise ChinwagError(
                f"{name} is not a readable DOCX: {member.filename} is compressed by a method Chinwag cannot read"
                f" (method {member.compress_type})"
            )


def _too_many_members(name: str, count: int) -> str:
    return f"{name} holds {count:,} files: a document holds at most {limits.MAX_DOCX_MEMBERS:,} (a zip bomb?)"


def _check_directory(name: str, data: bytes) -> None:
    """The ZIP's own count of its members and the size of their list, checked before zipfile reads the
    list (it makes an object per member: millions fit in a file under the size limit)."""
    end = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))
    if end < 0 or len(data) < end + 22:
        return  # no end record: zipfile says it is damaged
    count, size = struct.unpack_from("<HL", data, end + 10)
    if (count == 0xFFFF or size == 0xFFFFFFFF) and data[end - 20 : end - 16] == b"PK\x06\x07":
        (at,) = struct.unpack_from("<Q", data, end - 12)  # the Zip64 end record: 64-bit fields
        if data[at : at + 4] == b"PK\x06\x06" and len(data) >= at + 48:
            count, size = struct.unpack_from("<QQ", data, at + 32)
    if count > limits.MAX_DOCX_MEMBERS and count != 0xFFFF:
        raise ChinwagError(_too_many_members(name, count))
    if size > limits.MAX_DOCX_DIRECTORY_BYTES and size != 0xFFFFFFFF:
        raise ChinwagError(f"{name} lists its files in {format_bytes(size)}: too big to be a document (a zip bomb?)")


# The longest text node python-docx's parser takes (libxml2 without XML_PARSE_HUGE).
_PARSER_TEXT_BYTES = 10_000_000
_W_P = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}p"


class _ParsingCost:
    """What python-docx's parse of a DOCX will build, counted by the same parser with no tree: elements,
    attributes, paragraphs, characters of text, the longest text node. Each past its limit refuses the file at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.elements = self.attributes = self.paragraphs = self.chars = self.node_bytes = 0

    def start(self, tag: str, attrib: Sized) -> None:
        self.elements += 1
        self.node_bytes = 0
        self._attributes(len(attrib))
        self._check_nodes()
        if tag == _W_P:
            self.paragraphs += 1
            if self.paragraphs > limits.MAX_DOCX_PARAGRAPHS:
                raise ChinwagError(
                    f"{self.name} holds more than {limits.MAX_DOCX_PARAGRAPHS:,} paragraphs: too many for a document"
                    " (a DOCX bomb?)"
                )

    def start_ns(self, prefix: str | None, uri: str) -> None:
        """A namespace declaration costs the tree as an attribute does (200,000 runs of 26 took 940 MB)."""
        self._attributes(1)

    def _attributes(self, count: int) -> None:
        self.attributes += count
        if self.attributes > limits.MAX_DOCX_ATTRIBUTES:
            raise ChinwagError(
                f"{self.name} holds more than {limits.MAX_DOCX_ATTRIBUTES:,} XML attributes: too costly to be a"
                " document (a DOCX bomb?)"
            )

    def comment(self, text: str) -> None:
        """A comment is a node of python-docx's tree as an element is (three million took 500 MB)."""
        self.elements += 1
        self._check_nodes()

    def pi(self, target: str, data: str | None = None) -> None:
        self.comment("")

    def _check_nodes(self) -> None:
        if self.elements > limits.MAX_DOCX_ELEMENTS:
            raise ChinwagError(
                f"{self.name} holds more than {limits.MAX_DOCX_ELEMENTS:,} XML elements: too costly to be a document"
                " (a DOCX bomb?)"
            )

    def end(self, tag: str) -> None:
        self.node_bytes = 0

    def data(self, text: str) -> None:
        self.chars += len(text)
        if self.chars > limits.MAX_TEXT_CHARS:
            raise ChinwagError(f"{self.name} holds too much text: more than {limits.MAX_TEXT_CHARS:,} characters")
        self.node_bytes += len(text.encode("utf-8", "surrogatepass"))
        if self.node_bytes > _PARSER_TEXT_BYTES:
            raise ChinwagError(
                f"{self.name} holds too much text in one piece: more than {format_bytes(_PARSER_TEXT_BYTES)} in one run"
            )

    def close(self) -> None:
        return None


def _check_parsing_cost(name: str, archive: zipfile.ZipFile, members: list[zipfile.ZipInfo]) -> None:
    """Stream every member through python-docx's parser with no tree built, before python-docx builds one.

    A member that is not XML (an image) stops its parse at once; one that breaks midway stops there, and
    python-docx says the file is damaged if it needs it. Either way its elements so far are counted."""
    from lxml import etree

    cost = _ParsingCost(name)
    for member in members:
        parser = etree.XMLParser(target=cost, remove_blank_text=True, resolve_entities=False)
        with archive.open(member) as f:
            try:
                while chunk := f.read(1 << 20):
                    parser.feed(chunk)
                parser.close()
            except etree.XMLSyntaxError:
                continue
