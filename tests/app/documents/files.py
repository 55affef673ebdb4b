"""Real documents written for the tests: multi-page PDFs with a text layer (fpdf2), an encrypted PDF
(pypdf's writer), an image-only PDF, DOCX files (python-docx). No mocks."""

import io
import zipfile
from pathlib import Path


def write_pdf(path: Path, pages: list[str]) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=11)  # a core font: no font file, same on every machine
    for text in pages:
        pdf.add_page()
        pdf.multi_cell(0, 6, text)
    pdf.output(str(path))
    return path


def write_encrypted_pdf(path: Path, source: Path, password: str = "secret") -> Path:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(str(source)).pages:
        writer.add_page(page)
    writer.encrypt(password)
    with open(path, "wb") as f:
        writer.write(f)
    return path


def png_bytes(width: int = 40, height: int = 30) -> bytes:
    """A real PNG (grey noise), written with zlib: no imaging library needed."""
    import struct
    import zlib

    raw = b"".join(b"\x00" + bytes((x * 7 + y * 13) % 256 for x in range(width)) for y in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def write_scanned_pdf(path: Path, tmp: Path) -> Path:
    """A PDF whose only page is an image: what a scanner makes."""
    from fpdf import FPDF

    image = tmp / "scan-page.png"
    image.write_bytes(png_bytes())
    pdf = FPDF()
    pdf.add_page()
    pdf.image(str(image), x=10, y=10, w=150)
    pdf.output(str(path))
    return path


def write_docx(path: Path, heading: str, paragraphs: list[str], table: list[list[str]] | None = None) -> Path:
    import docx

    document = docx.Document()
    document.add_heading(heading, level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    if table:
        t = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                t.cell(r, c).text = value
    document.save(str(path))
    return path


def write_zip_bomb_docx(path: Path, source: Path, inflated: int) -> Path:
    """A real DOCX plus one member that inflates to `inflated` bytes of zeros (deflated to almost nothing)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            out.writestr(item, src.read(item))
        with out.open("word/media/bomb.bin", "w", force_zip64=True) as f:
            block = b"\x00" * (1 << 20)
            for _ in range(inflated // len(block)):
                f.write(block)
    path.write_bytes(buffer.getvalue())
    return path


def _with_body(path: Path, source: Path, write_body) -> Path:
    """A copy of a real DOCX whose document.xml body is what `write_body(f)` streams (never all in memory)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            if item.filename != "word/document.xml":
                out.writestr(item, src.read(item))
                continue
            head, _, tail = src.read(item).partition(b"<w:body>")
            with out.open("word/document.xml", "w", force_zip64=True) as f:
                f.write(head + b"<w:body>")
                write_body(f)
                f.write(tail)
    return path


def write_paragraph_bomb_docx(path: Path, source: Path, declared: int) -> Path:
    """Issue 35 item 4: `declared` bytes of empty paragraphs (<w:p/>), deflated to almost nothing."""

    def body(f) -> None:
        block = b"<w:p/>" * (1 << 17)
        for _ in range(declared // len(block)):
            f.write(block)

    return _with_body(path, source, body)


def write_elements_docx(path: Path, source: Path, paragraphs: int, runs: int) -> Path:
    """`paragraphs` paragraphs of `runs` one-word runs each: many elements, few paragraphs."""
    paragraph = b"<w:p>" + b"<w:r><w:t>word </w:t></w:r>" * runs + b"</w:p>"
    return _with_body(path, source, lambda f: f.write(paragraph * paragraphs))


def write_one_run_docx(path: Path, source: Path, text: str, repeat: int) -> Path:
    """One paragraph whose one run holds `text` `repeat` times."""

    def body(f) -> None:
        f.write(b"<w:p><w:r><w:t>")
        piece = text.encode() * max(1, (1 << 20) // len(text.encode()))
        left = repeat * len(text.encode())
        while left > 0:
            f.write(piece[:left])
            left -= len(piece)
        f.write(b"</w:t></w:r></w:p>")

    return _with_body(path, source, body)


def write_many_members_docx(path: Path, source: Path, count: int) -> Path:
    """A real DOCX plus `count` empty members: a list of members far longer than a document's."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out:
        for item in src.infolist():
            out.writestr(item, src.read(item))
        for i in range(count):
            out.writestr(f"word/media/m{i}", b"")
    return path


# Every bad input of issue 16, each with the one line it must get (a regex anchored at the start).
BAD_INPUTS = [
    "encrypted",
    "scanned",
    "corrupt_pdf",
    "corrupt_docx",
    "zip_bomb",
    "cyclic_pdf",
    "huge",
    "dev_zero",
    "fifo",
    "symlink_loop",
    "image",
    "binary",
    "missing",
    "folder",
]


def write_cyclic_pdf(path: Path) -> Path:
    """A PDF whose objects refer to themselves (a page its own parent) and nest 20,000 deep."""
    nested = "[" * 20000 + "]" * 20000
    body = (
        "%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R /Loop 4 0 R >> endobj\n"
        "2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 /Parent 2 0 R >> endobj\n"
        "3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 10 10] /Deep " + nested + " >> endobj\n"
        "4 0 obj << /Next 4 0 R >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    )
    path.write_bytes(body.encode())
    return path


def make_bad(kind: str, tmp: Path) -> tuple[str, str]:
    """Write one bad input (real files, the real limits); returns (its path, the line it gets)."""
    import os

    from app.documents import limits

    tmp.mkdir(parents=True, exist_ok=True)
    if kind == "encrypted":
        source = write_pdf(tmp / "plain.pdf", ["Secret plans."])
        return str(write_encrypted_pdf(tmp / "report.pdf", source)), r"report\.pdf is password-protected$"
    if kind == "scanned":
        return str(write_scanned_pdf(tmp / "scan.pdf", tmp)), r"scan\.pdf has no text: it is a scanned image$"
    if kind == "corrupt_pdf":
        data = write_pdf(tmp / "whole.pdf", ["Some text."]).read_bytes()
        (tmp / "broken.pdf").write_bytes(data[:200])
        return str(tmp / "broken.pdf"), r"broken\.pdf is not a readable PDF: it is damaged or incomplete$"
    if kind == "corrupt_docx":
        data = write_docx(tmp / "whole.docx", "T", ["text"]).read_bytes()
        (tmp / "broken.docx").write_bytes(data[: len(data) // 2])
        return str(tmp / "broken.docx"), r"broken\.docx is not a readable DOCX: it is damaged or incomplete$"
    if kind == "zip_bomb":
        source = write_docx(tmp / "plain.docx", "T", ["text"])
        path = write_zip_bomb_docx(tmp / "bomb.docx", source, limits.MAX_DOCX_UNCOMPRESSED + (1 << 20))
        return str(path), r"bomb\.docx unpacks to [\d.]+ MB: too big to be a document \(a zip bomb\?\)$"
    if kind == "cyclic_pdf":
        return str(write_cyclic_pdf(tmp / "loop.pdf")), r"loop\.pdf (is not a readable PDF|is damaged|has no)"
    if kind == "huge":
        with open(tmp / "huge.txt", "wb") as f:  # sparse: 2 GB on paper, nothing on disk
            f.truncate(2 * 1024**3)
        return str(tmp / "huge.txt"), r"huge\.txt is too big to attach: 2\.0 GB, the limit is [\d.]+ MB$"
    if kind == "dev_zero":
        return "/dev/zero", r"zero is a device, not a file$"
    if kind == "fifo":
        os.mkfifo(tmp / "pipe")
        return str(tmp / "pipe"), r"pipe is a named pipe, not a file$"
    if kind == "symlink_loop":
        (tmp / "a").symlink_to(tmp / "b")
        (tmp / "b").symlink_to(tmp / "a")
        return str(tmp / "a"), r"cannot open a: Too many levels of symbolic links"
    if kind == "image":
        (tmp / "photo.png").write_bytes(png_bytes())
        return str(tmp / "photo.png"), r"photo\.png is an image: Chinwag reads text, PDF and DOCX$"
    if kind == "binary":
        (tmp / "blob.dat").write_bytes(bytes(range(256)) * 40)
        return str(tmp / "blob.dat"), r"blob\.dat is a binary file: Chinwag reads text, PDF and DOCX$"
    if kind == "missing":
        return str(tmp / "gone.pdf"), r"gone\.pdf is gone: it was moved or deleted"
    if kind == "folder":
        (tmp / "folder").mkdir()
        return str(tmp / "folder"), r"folder is a folder: attach the files in it$"
    raise ValueError(kind)


# --- PDF bombs (issue 35 item 3), written byte by byte: fpdf2 cannot nest forms or write such a stream ---

_HELVETICA = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def _write_objects(path: Path, objects: list[bytes]) -> Path:
    """A PDF of `objects` (numbered from 1, the first the catalog) with a correct cross-reference table."""
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer << /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))
    return path


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), extra, data)


def _one_page(contents: bytes, resources: bytes) -> list[bytes]:
    return [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R /Resources " + resources + b" >>",
        _HELVETICA,
        contents,
    ]


def write_xobject_bomb_pdf(path: Path, depth: int = 10, fanout: int = 10) -> Path:
    """One page drawing a form that draws the next `fanout` times, `depth` deep: fanout**depth lines of text
    from a file of about 2 KB."""
    objects = _one_page(_stream(b"/X Do"), b"<< /Font << /F1 4 0 R >> /XObject << /X 6 0 R >> >>")
    for level in range(depth):
        form = b" /Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources "
        if level < depth - 1:
            body, resources = b"/X Do " * fanout, b"<< /XObject << /X %d 0 R >> >>" % (7 + level)
        else:
            body, resources = (
                b"BT /F1 12 Tf 10 10 Td (Nested words all the way down) Tj ET",
                b"<< /Font << /F1 4 0 R >> >>",
            )
        objects.append(_stream(body, form + resources))
    return _write_objects(path, objects)


def write_inflating_pdf(path: Path, inflated: int = 400_000_000) -> Path:
    """One page whose content stream (text drawing operators) inflates to `inflated` bytes; the file is about
    1/300 of that."""
    import zlib

    line = b"BT /F1 12 Tf 10 10 Td (Inflated words) Tj ET\n"
    block = line * ((1 << 20) // len(line))
    packer = zlib.compressobj(6)
    parts = [packer.compress(block) for _ in range(inflated // len(block))]
    parts.append(packer.flush())
    contents = _stream(b"".join(parts), b" /Filter /FlateDecode")
    return _write_objects(path, _one_page(contents, b"<< /Font << /F1 4 0 R >> >>"))


def write_slow_pages_pdf(path: Path, pages: int, inflated: int = 10 << 20) -> Path:
    """`pages` pages sharing one content stream of `inflated` bytes of no-op operators (each page costs pdfium
    a fraction of a second and a few dozen MB: each just under the per-page bounds); the file is a few KB a page."""
    import zlib

    noops = b"1 0 0 1 0 0 cm\n" * (inflated // 15)
    contents = _stream(
        zlib.compress(b"BT /F1 12 Tf 10 10 Td (Page words) Tj ET\n" + noops, 9), b" /Filter /FlateDecode"
    )
    kids = b" ".join(b"%d 0 R" % (5 + i) for i in range(pages))
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 3 0 R >> >> >>"
    head = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages)]
    return _write_objects(path, [*head, _HELVETICA, contents, *[page] * pages])


def write_table_docx(path: Path, source: Path, rows: bytes) -> Path:
    """A copy of a real DOCX whose body is one table of `rows` (<w:tr> elements, written as they are)."""
    return _with_body(
        path, source, lambda f: f.write(b"<w:tbl><w:tblGrid><w:gridCol/></w:tblGrid>" + rows + b"</w:tbl>")
    )


def write_member_flags_docx(path: Path, source: Path, method: int | None = None, encrypted: bool = False) -> Path:
    """A copy of a real DOCX whose document.xml says (in its local header and the central directory) it is
    compressed by `method`, or encrypted: what zipfile cannot open."""
    import struct

    data = bytearray(source.read_bytes())
    with zipfile.ZipFile(source) as z:
        local = z.getinfo("word/document.xml").header_offset
    end = data.rfind(b"PK\x05\x06")
    (at,) = struct.unpack_from("<L", data, end + 16)
    while data[at : at + 4] == b"PK\x01\x02":
        size, extra, comment = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46 : at + 46 + size] == b"word/document.xml":
            for flags in (at + 8, local + 6):  # general purpose flags, then the method right after them
                if encrypted:
                    struct.pack_into("<H", data, flags, struct.unpack_from("<H", data, flags)[0] | 0x1)
                if method is not None:
                    struct.pack_into("<H", data, flags + 2, method)
        at += 46 + size + extra + comment
    path.write_bytes(bytes(data))
    return path


def write_attributes_docx(path: Path, source: Path, runs: int) -> Path:
    """`runs` empty runs of 26 empty attributes each, in paragraphs of 1,000: few elements, many attributes."""
    run = b"<w:r " + b" ".join(b'%s=""' % bytes([c]) for c in range(97, 123)) + b"/>"
    paragraph = b"<w:p>" + run * 1_000 + b"</w:p>"
    return _with_body(path, source, lambda f: [f.write(paragraph) for _ in range(runs // 1_000)])


def write_nodes_docx(path: Path, source: Path, node: bytes, count: int) -> Path:
    """`count` copies of `node` (a comment, a processing instruction) in paragraphs of 1,000."""
    paragraph = b"<w:p>" + node * 1_000 + b"</w:p>"
    return _with_body(path, source, lambda f: [f.write(paragraph) for _ in range(count // 1_000)])
