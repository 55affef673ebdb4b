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
