"""Extraction from real files: text in every encoding people use, PDFs with page markers, DOCX; bad input
gets one line naming the file, and bounds are checked before the work they bound."""

import os
import re
import socket
import time

import pytest

from app.documents import limits
from app.documents.extract import extract, extract_bytes
from engine.errors import ChinwagError
from tests.app.documents.files import (
    BAD_INPUTS,
    make_bad,
    png_bytes,
    write_cyclic_pdf,
    write_docx,
    write_elements_docx,
    write_encrypted_pdf,
    write_many_members_docx,
    write_one_run_docx,
    write_paragraph_bomb_docx,
    write_pdf,
    write_scanned_pdf,
    write_zip_bomb_docx,
)

PAGES = ["The first page talks about apples.", "The second page talks about pears.", "Bananas on page three."]


def test_text_encodings(tmp_path):
    text = "Grüße, café – naïve\nline two\n"
    cases = {
        "utf8.txt": text.encode("utf-8"),
        "bom8.md": b"\xef\xbb\xbf" + text.encode("utf-8"),
        "utf16le.py": text.encode("utf-16"),  # with its BOM
        "utf16be.c": b"\xfe\xff" + text.encode("utf-16-be"),
        "latin1.csv": "Grüße, café naïve\nline two\n".encode("latin-1"),
        "crlf.log": text.replace("\n", "\r\n").encode("utf-8"),
        "no-suffix": text.encode("utf-8"),
    }
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        doc = extract(tmp_path / name)
        assert doc.kind == "text" and doc.name == name
        assert "Grüße, café" in doc.text and "line two" in doc.text and "\r" not in doc.text
        assert doc.size == len(data) and len(doc.sha256) == 64


def test_pdf_pages_are_marked(tmp_path):
    doc = extract(write_pdf(tmp_path / "report.pdf", PAGES))
    assert doc.kind == "pdf" and doc.pages == 3
    assert doc.text.index("[page 1]") < doc.text.index("apples") < doc.text.index("[page 2]")
    assert doc.text.index("[page 2]") < doc.text.index("pears") < doc.text.index("[page 3]") < doc.text.index("Bananas")


def test_pdf_progress_per_page(tmp_path):
    seen = []
    extract(write_pdf(tmp_path / "report.pdf", PAGES), progress=lambda done, total: seen.append((done, total)))
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_docx_headings_paragraphs_tables(tmp_path):
    path = write_docx(
        tmp_path / "notes.docx", "Budget", ["Travel costs rose.", "Food fell."], [["Item", "Cost"], ["Tea", "3"]]
    )
    doc = extract(path)
    assert doc.kind == "docx"
    assert doc.text.splitlines()[0] == "# Budget"
    assert "Travel costs rose." in doc.text and "Item | Cost" in doc.text and "Tea | 3" in doc.text


def test_a_table_inside_a_table_cell_is_read_too(tmp_path):
    """python-docx's cell text holds only the cell's own paragraphs: a nested table's text was lost."""
    import docx

    document = docx.Document()
    outer = document.add_table(rows=1, cols=2)
    outer.cell(0, 0).text = "Region"
    inner = outer.cell(0, 1).add_table(rows=1, cols=2)
    inner.cell(0, 0).text = "North: 12 shops"
    inner.cell(0, 1).text = "South: 7 shops"
    document.save(tmp_path / "shops.docx")
    text = extract(tmp_path / "shops.docx").text
    assert "Region |" in text and "North: 12 shops" in text and "South: 7 shops" in text


def test_encrypted_pdf(tmp_path):
    source = write_pdf(tmp_path / "plain.pdf", PAGES)
    path = write_encrypted_pdf(tmp_path / "report.pdf", source)
    with pytest.raises(ChinwagError, match=r"^report\.pdf is password-protected$"):
        extract(path)


def test_scanned_pdf(tmp_path):
    path = write_scanned_pdf(tmp_path / "scan.pdf", tmp_path)
    with pytest.raises(ChinwagError, match=r"^scan\.pdf has no text: it is a scanned image$"):
        extract(path)


@pytest.mark.parametrize("cut", [20, 200, 600])
def test_corrupt_pdf(tmp_path, cut):
    data = write_pdf(tmp_path / "whole.pdf", PAGES).read_bytes()
    (tmp_path / "broken.pdf").write_bytes(data[:cut])
    with pytest.raises(ChinwagError, match=r"^broken\.pdf (is not a readable PDF|is damaged|has no)"):
        extract(tmp_path / "broken.pdf")


def test_cyclic_and_deeply_nested_pdf(tmp_path):
    """Objects that refer to themselves or nest thousands deep: one line or some text, never a crash or a hang."""
    with pytest.raises(ChinwagError, match=r"^loop\.pdf "):
        extract(write_cyclic_pdf(tmp_path / "loop.pdf"))


def test_corrupt_docx(tmp_path):
    data = write_docx(tmp_path / "whole.docx", "T", ["text"]).read_bytes()
    (tmp_path / "broken.docx").write_bytes(data[: len(data) // 2])
    with pytest.raises(ChinwagError, match=r"^broken\.docx is not a readable DOCX"):
        extract(tmp_path / "broken.docx")


def test_docx_zip_bomb_refused_before_unpacking(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_DOCX_UNCOMPRESSED", 8 << 20)
    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_zip_bomb_docx(tmp_path / "bomb.docx", source, 16 << 20)
    assert path.stat().st_size < 1 << 20
    with pytest.raises(ChinwagError, match=r"^bomb\.docx unpacks to .*zip bomb"):
        extract(path)


def test_docx_paragraph_bomb_is_refused_within_a_memory_bound(tmp_path):
    """Issue 35 item 4: 262 MB of empty paragraphs, under the unpacked limit, built a tree of ~40M elements
    (3 GB); the paragraphs are counted by a parse that builds nothing, and the file refused early."""
    from tests.app.documents.bounded import extract_bounded

    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_paragraph_bomb_docx(tmp_path / "paras.docx", source, 262_000_000)
    assert path.stat().st_size < 1 << 20
    result = extract_bounded(path, max_bytes=2 << 30)
    assert result["line"] == (
        f"paras.docx holds more than {limits.MAX_DOCX_PARAGRAPHS:,} paragraphs: too many for a document (a DOCX bomb?)"
    )
    assert result["peak"] < 300 << 20


def test_docx_elements_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "MAX_DOCX_ELEMENTS", 5_000)
    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_elements_docx(tmp_path / "runs.docx", source, paragraphs=100, runs=40)
    with pytest.raises(ChinwagError, match=r"^runs\.docx holds more than 5,000 XML elements: too costly"):
        extract(path)


def test_docx_with_too_many_members_says_so(tmp_path, monkeypatch):
    """It said "unpacks to 932 B: too big to be a document": the member count is what is over its limit."""
    monkeypatch.setattr(limits, "MAX_DOCX_MEMBERS", 100)
    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_many_members_docx(tmp_path / "many.docx", source, 200)
    with pytest.raises(
        ChinwagError, match=r"^many\.docx holds 2\d\d files: a document holds at most 100 \(a zip bomb\?\)$"
    ):
        extract(path)


def test_docx_member_list_is_checked_before_zipfile_reads_it(tmp_path):
    """400,000 members: zipfile made an object for each (300 MB) before the count was checked."""
    import tracemalloc

    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_many_members_docx(tmp_path / "many.docx", source, 100_000)
    data = path.read_bytes()
    tracemalloc.start()
    try:
        with pytest.raises(ChinwagError):
            extract_bytes("many.docx", data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_docx_with_one_huge_run_is_too_big_not_damaged(tmp_path):
    """250 MB in one run said "damaged" (the XML parser's limit on one text node): it is too much text."""
    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_one_run_docx(tmp_path / "run.docx", source, "word ", 2_400_000)
    with pytest.raises(ChinwagError, match=r"^run\.docx holds too much text: more than 8,000,000 characters$"):
        extract(path)


def test_docx_run_longer_than_the_parser_takes_says_so(tmp_path):
    """Under the characters limit but over the parser's 10 MB for one text node (three bytes a character)."""
    source = write_docx(tmp_path / "plain.docx", "T", ["text"])
    path = write_one_run_docx(tmp_path / "cjk.docx", source, "文字", 1_800_000)
    with pytest.raises(
        ChinwagError, match=r"^cjk\.docx holds too much text in one piece: more than [\d.]+ MB in one run$"
    ):
        extract(path)


@pytest.mark.timing
def test_docx_paragraph_styles_cost_little(tmp_path):
    """python-docx looked each paragraph's style up among all the styles (a millisecond a paragraph):
    100,000 paragraphs took minutes. A wide bound: seconds now."""
    import time

    source = write_docx(tmp_path / "plain.docx", "Title", ["text"])
    path = write_elements_docx(tmp_path / "long.docx", source, paragraphs=100_000, runs=1)
    start = time.monotonic()
    doc = extract(path)
    assert "# Title" in doc.text.splitlines() and time.monotonic() - start < 40


def test_huge_file_refused_before_reading(tmp_path):
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:  # a sparse 2 GB file: its size says no before any byte is read
        f.truncate(2 * 1024**3)
    with pytest.raises(ChinwagError, match=r"^huge\.txt is too big to attach: 2\.0 GB, the limit is"):
        extract(path)


def test_devices_fifos_sockets_directories(tmp_path):
    with pytest.raises(ChinwagError, match=r"^zero is a device, not a file$"):
        extract("/dev/zero")
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(ChinwagError, match=r"^pipe is a named pipe, not a file$"):
        extract(tmp_path / "pipe")  # no writer: a blocking open would wait forever
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    with pytest.raises(ChinwagError, match=r"^cannot open sock"):
        extract(tmp_path / "sock")
    sock.close()
    (tmp_path / "folder").mkdir()
    with pytest.raises(ChinwagError, match=r"^folder is a folder"):
        extract(tmp_path / "folder")


def test_symlink_loop_and_missing(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ChinwagError, match=r"^cannot open a: Too many levels of symbolic links"):
        extract(tmp_path / "a")
    with pytest.raises(ChinwagError, match=r"^gone\.pdf is gone: it was moved or deleted"):
        extract(tmp_path / "gone.pdf")


def test_images_and_binaries(tmp_path):
    (tmp_path / "photo.png").write_bytes(png_bytes())
    with pytest.raises(ChinwagError, match=r"^photo\.png is an image: Chinwag reads text, PDF and DOCX$"):
        extract(tmp_path / "photo.png")
    (tmp_path / "tool").write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4)
    with pytest.raises(ChinwagError, match=r"^tool is a program: Chinwag reads text"):
        extract(tmp_path / "tool")
    (tmp_path / "blob.dat").write_bytes(bytes(range(256)) * 40)
    with pytest.raises(ChinwagError, match=r"^blob\.dat is a binary file: Chinwag reads text"):
        extract(tmp_path / "blob.dat")


def _random_utf16_units(count: int, seed: int = 0) -> bytes:
    """Random 16-bit units, none a surrogate: every pair decodes, to characters from all over the BMP."""
    import random

    r = random.Random(seed)
    units = (u for u in iter(lambda: r.randrange(1 << 16), None) if not 0xD800 <= u < 0xE000)
    return b"".join(next(units).to_bytes(2, "little") for _ in range(count))


def test_binary_after_a_utf16_bom_that_decodes_is_refused():
    """Issue 35 item 8: the mark says UTF-16, what follows is noise; it decodes, so only the binary check can tell."""
    with pytest.raises(ChinwagError, match=r"^noise\.txt is a binary file: Chinwag reads text, PDF and DOCX$"):
        extract_bytes("noise.txt", b"\xff\xfe" + _random_utf16_units(50_000))


def test_binary_after_a_utf16_bom_that_does_not_decode_is_called_binary():
    import random

    data = b"\xff\xfe" + random.Random(1).randbytes(100_000)
    with pytest.raises(ChinwagError, match=r"^noise\.txt is a binary file: Chinwag reads text, PDF and DOCX$"):
        extract_bytes("noise.txt", data)


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        (b"", b"\x00" * 200_000),  # zeros: the NUL check read only the first 8 KB
        (b"", bytes(range(256)) * 1_000),  # noise: not UTF-8, so read as Latin-1, whose check read 8,192 characters
        (b"\xef\xbb\xbf", bytes(range(32)) * 5_000),  # after a UTF-8 mark: controls, valid UTF-8
    ],
)
def test_binary_after_64_kb_of_text_is_refused(head, tail):
    """Issue 35 item 8, re-tried: 68 KB of text and then binary was read as text, noise and all (a file's
    first 8,192 characters were all the binary checks read)."""
    with pytest.raises(ChinwagError) as caught:
        extract_bytes("mixed.txt", head + b"plain words here\n" * 4_000 + tail)
    assert str(caught.value) == "mixed.txt holds binary data from character 68,000 on: Chinwag reads text, PDF and DOCX"


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_read(encoding):
    """Issue 35 item 8, re-tried: UTF-16 saved with no mark (its NULs) was called a binary file."""
    text = "Plain words in UTF-16, café included.\n" * 500
    assert extract_bytes("wide.txt", text.encode(encoding)).text == text


def test_small_numbers_in_16_bits_are_still_binary():
    data = b"".join(n.to_bytes(2, "little") for n in list(range(32)) * 500)  # every other byte zero, like UTF-16
    with pytest.raises(ChinwagError, match=r"^counts\.bin is a binary file: Chinwag reads text, PDF and DOCX$"):
        extract_bytes("counts.bin", data)


def test_text_with_a_few_odd_characters_is_still_text():
    text = ("Words and more words.\n" * 3_000 + "\x07\ufffd\ue000") * 40
    assert extract_bytes("odd.txt", text.encode()).text == text


def test_an_empty_text_file_is_refused():
    with pytest.raises(ChinwagError, match=r"^empty\.txt is empty$"):
        extract_bytes("empty.txt", b"")


def test_a_text_file_of_only_spaces_is_refused():
    with pytest.raises(ChinwagError, match=r"^blank\.md has no text: it holds only spaces and line breaks$"):
        extract_bytes("blank.md", b" \n\r\n\t \n")


def test_text_bound(monkeypatch):
    monkeypatch.setattr(limits, "MAX_TEXT_CHARS", 1000)
    with pytest.raises(ChinwagError, match=r"^long\.txt holds too much text"):
        extract_bytes("long.txt", b"word " * 1000)


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_every_bad_input_is_one_line_within_a_memory_bound(tmp_path, kind):
    """Each of the issue's bad inputs: one line naming the file, and memory bounded (a zip bomb, /dev/zero
    or a 2 GB file never get read into memory: the peak stays far below what they would take)."""
    import re
    import tracemalloc

    path, line = make_bad(kind, tmp_path)
    size = os.path.getsize(path) if os.path.isfile(path) and kind != "huge" else 0
    tracemalloc.start()
    try:
        with pytest.raises(ChinwagError) as caught:
            extract(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert re.match(line, message) and "\n" not in message
    assert peak < 4 * size + (16 << 20)


def test_docx_external_entities_and_pdf_javascript_are_never_resolved_or_run(tmp_path):
    """Untrusted files: an XML external entity pointing at a local file is not read into the text, and a
    PDF whose open action is JavaScript (writing a file if run) is extracted without running it."""
    import zipfile

    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-CONTENT")
    source = write_docx(tmp_path / "plain.docx", "Title", ["Hello &xxe; world"])
    evil = tmp_path / "evil.docx"
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(evil, "w", zipfile.ZIP_DEFLATED) as out:
        for item in src.infolist():
            data = src.read(item)
            if item.filename == "word/document.xml":
                text = data.decode().replace("&amp;xxe;", "&xxe;")
                head, _, body = text.partition("?>")
                doctype = f'<!DOCTYPE w:document [<!ENTITY xxe SYSTEM "file://{secret}">]>'
                data = (head + "?>" + doctype + body).encode()
            out.writestr(item, data)
    try:
        doc = extract(evil)
        assert "TOP-SECRET-CONTENT" not in doc.text
    except ChinwagError as e:  # refusing the file is fine too: one line, nothing read
        assert str(e).startswith("evil.docx ") and "TOP-SECRET" not in str(e)
    marker = tmp_path / "ran"
    js = f"app.alert('x'); this.exportDataObject({{cName: '{marker}'}});"
    body = (
        "%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R /OpenAction 4 0 R >> endobj\n"
        "2 0 obj << /Type /Pages /Kids [3 0 R] /Count 1 >> endobj\n"
        "3 0 obj << /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 5 0 R "
        "/Resources << /Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >> >> >> endobj\n"
        f"4 0 obj << /S /JavaScript /JS ({js}) >> endobj\n"
        "5 0 obj << /Length 44 >> stream\nBT /F1 12 Tf 20 100 Td (Plain words) Tj ET\nendstream endobj\n"
        "trailer << /Root 1 0 R >>\n%%EOF\n"
    )
    (tmp_path / "script.pdf").write_bytes(body.encode())
    assert "Plain words" in extract(tmp_path / "script.pdf").text
    assert not marker.exists()


def test_pdf_of_nested_forms_is_refused_within_a_memory_bound(tmp_path):
    """Issue 35 item 3: a 2 KB page of form XObjects drawing each other ten deep passed 3 GB in 12 s; pdfium now
    reads in a child process that is stopped when a page passes its memory bound, and the app gets one line."""
    from tests.app.documents.bounded import extract_bounded
    from tests.app.documents.files import write_xobject_bomb_pdf

    path = write_xobject_bomb_pdf(tmp_path / "forms.pdf")
    assert path.stat().st_size < 4096
    result = extract_bounded(path, max_bytes=2 << 30, timeout=120)
    assert result["line"] == (
        "forms.pdf is too costly to read: page 1 needed more than 256.0 MB of memory (a PDF bomb?)"
    )
    assert result["peak"] < limits.PDF_PAGE_BYTES + (200 << 20)  # the reader's page bound, plus its own size
    assert result["seconds"] < 60


def test_pdf_page_inflating_to_400_mb_is_refused_within_a_memory_bound(tmp_path):
    from tests.app.documents.bounded import extract_bounded
    from tests.app.documents.files import write_inflating_pdf

    path = write_inflating_pdf(tmp_path / "inflated.pdf", 400_000_000)
    assert path.stat().st_size < 2 << 20
    result = extract_bounded(path, max_bytes=2 << 30, timeout=120)
    assert result["line"] == (
        "inflated.pdf is too costly to read: page 1 needed more than 256.0 MB of memory (a PDF bomb?)"
    )
    assert result["peak"] < limits.PDF_PAGE_BYTES + (200 << 20)
    assert result["seconds"] < 60


def test_pdf_page_with_too_many_characters_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(limits, "PDF_PAGE_CHARS", 2_000)
    path = write_pdf(tmp_path / "dense.pdf", ["A short first page.", "word " * 1_000])
    line = (
        r"^dense\.pdf holds too much text on page 2: 4,\d{3} characters, a page holds at most 2,000 \(a PDF bomb\?\)$"
    )
    with pytest.raises(ChinwagError, match=line):
        extract(path)


def test_pdf_page_that_takes_too_long_is_refused(tmp_path, monkeypatch):
    """A page's time is bounded whatever its memory: 100,000 nested lines take pdfium far past 10 ms."""
    from tests.app.documents.files import write_xobject_bomb_pdf

    monkeypatch.setattr(limits, "PDF_PAGE_SECONDS", 0.01)
    with pytest.raises(ChinwagError) as caught:
        extract(write_xobject_bomb_pdf(tmp_path / "slow.pdf", depth=5))
    assert str(caught.value) == "slow.pdf is too costly to read: page 1 took more than 0.01 s (a PDF bomb?)"


def test_pdf_pages_each_under_their_bounds_are_bounded_in_all(tmp_path, monkeypatch):
    """Issue 35 item 3, re-tried: 5,000 pages each just under the page bounds (a shared stream of no-op
    operators, half a second a page here) took hours; all the pages have one time bound too."""
    from tests.app.documents.files import write_slow_pages_pdf

    monkeypatch.setattr(limits, "PDF_TOTAL_SECONDS", 1.0)
    path = write_slow_pages_pdf(tmp_path / "pages.pdf", pages=200)
    started = time.monotonic()
    with pytest.raises(ChinwagError) as caught:
        extract(path)
    assert re.fullmatch(
        r"pages\.pdf is too costly to read: its pages took more than 1 s in all \([\d,]+ read, a PDF bomb\?\)",
        str(caught.value),
    ), str(caught.value)
    assert time.monotonic() - started < 30


def test_pdf_reader_is_gone_after_reading(tmp_path):
    """The child process ends with each file, read or refused: nothing is left running."""
    from pathlib import Path

    tasks = list(Path("/proc/self/task").glob("*/children"))
    if not tasks:
        pytest.skip("needs Linux's /proc/<pid>/task/<tid>/children")

    def children() -> set[str]:
        return {pid for task in Path("/proc/self/task").glob("*/children") for pid in task.read_text().split()}

    before = children()
    extract(write_pdf(tmp_path / "report.pdf", PAGES))
    with pytest.raises(ChinwagError):
        extract(write_encrypted_pdf(tmp_path / "locked.pdf", tmp_path / "report.pdf"))
    assert children() == before
