"""DOCX files built against python-docx's table reading and zipfile's member handling (issue 35 item 4, re-tried)."""

import time

import pytest

from app.documents.extract import extract
from engine.errors import ChinwagError
from tests.app.documents.files import (
    write_attributes_docx,
    write_docx,
    write_member_flags_docx,
    write_nodes_docx,
    write_table_docx,
)

_CELL = b"<w:tc>%s<w:p><w:r><w:t>%s</w:t></w:r></w:p></w:tc>"


@pytest.fixture
def source(tmp_path):
    return write_docx(tmp_path / "plain.docx", "Title", ["Body text."])


def test_a_cell_spanning_a_billion_columns_is_read_once(tmp_path, source):
    """python-docx's row.cells repeats a cell once per column it spans: a 2 KB file declaring a span of a billion
    ran for ever and took gigabytes."""
    from tests.app.documents.bounded import extract_bounded

    rows = b"<w:tr>" + _CELL % (b'<w:tcPr><w:gridSpan w:val="1000000000"/></w:tcPr>', b"wide") + b"</w:tr>"
    path = write_table_docx(tmp_path / "span.docx", source, rows)
    result = extract_bounded(path, max_bytes=1 << 30, timeout=120)
    assert result["line"] == f"docx: {len(extract_text_of(['wide']))} characters", result
    assert result["seconds"] < 30


def extract_text_of(rows: list[str]) -> str:
    return "\n".join(rows) + "\n\n# Title\nBody text."


def test_a_cell_merged_down_thousands_of_rows_is_read_in_linear_time(tmp_path, source):
    """python-docx finds a merged cell's text by walking up row by row, recursively: 20,000 rows merged into one
    took 26 s and ended in a RecursionError (a bug's traceback for a bad file)."""
    top = _CELL % (b'<w:tcPr><w:vMerge w:val="restart"/></w:tcPr>', b"merged")
    below = b"<w:tr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>" + _CELL % (b"", b"side") + b"</w:tr>"
    rows = b"<w:tr>" + top + _CELL % (b"", b"first") + b"</w:tr>" + below * 20_000
    path = write_table_docx(tmp_path / "merged.docx", source, rows)
    started = time.monotonic()
    doc = extract(path)
    assert time.monotonic() - started < 20
    lines = doc.text.splitlines()
    assert lines[:3] == ["merged | first", " | side", " | side"], lines[:3]
    assert doc.text.count("merged") == 1 and doc.text.count("side") == 20_000


def test_spans_and_merges_keep_each_cells_text(tmp_path, source):
    rows = (
        b"<w:tr>" + _CELL % (b'<w:tcPr><w:gridSpan w:val="2"/></w:tcPr>', b"Both") + _CELL % (b"", b"C") + b"</w:tr>"
        b"<w:tr>" + _CELL % (b"", b"a") + _CELL % (b"", b"b") + _CELL % (b"", b"c") + b"</w:tr>"
    )
    doc = extract(write_table_docx(tmp_path / "table.docx", source, rows))
    assert doc.text.splitlines()[:2] == ["Both | C", "a | b | c"]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (
            {"method": 99},
            "odd.docx is not a readable DOCX: word/document.xml is compressed by a method Chinwag cannot read"
            " (method 99)",
        ),
        ({"encrypted": True}, "odd.docx is password-protected"),
    ],
)
def test_members_zipfile_cannot_open_are_one_line(tmp_path, source, flags, line):
    """zipfile raises NotImplementedError for an unknown compression method and RuntimeError for an encrypted
    member: both were a bug's traceback for a bad file."""
    path = write_member_flags_docx(tmp_path / "odd.docx", source, **flags)
    with pytest.raises(ChinwagError) as caught:
        extract(path)
    assert str(caught.value) == line


def refused_as_a_bomb(path, what: str, max_bytes: int, peak: int) -> None:
    """Read in a child under `max_bytes`: one line saying the DOCX holds too many `what`, at a peak under `peak`."""
    from tests.app.documents.bounded import extract_bounded

    result = extract_bounded(path, max_bytes=max_bytes, timeout=120)
    assert result["line"] == (
        f"{path.name} holds more than 2,000,000 XML {what}: too costly to be a document (a DOCX bomb?)"
    ), result
    assert result["peak"] < peak


def test_attributes_are_bounded_like_elements(tmp_path, source):
    """Elements were counted, attributes not: a 144 KB file of 200,000 runs of 26 empty attributes took 1.3 GB in
    python-docx's tree (2.6 GB for this one), and two million such runs would take over 12 GB."""
    from app.documents import limits

    path = write_attributes_docx(tmp_path / "attributes.docx", source, runs=400_000)
    assert path.stat().st_size < 1 << 20
    refused_as_a_bomb(path, "attributes", (3 << 30) // 2, 400 << 20)
    assert limits.MAX_DOCX_ATTRIBUTES == 2_000_000


@pytest.mark.parametrize("node", [b"<!---->", b"<?a?>"])
def test_comments_and_processing_instructions_count_as_elements(tmp_path, source, node):
    """Only elements were counted: three million empty comments (74 KB of file) took 500 MB in python-docx's
    tree, and the 256 MB a DOCX may unpack to holds 36 million."""
    path = write_nodes_docx(tmp_path / "nodes.docx", source, node, 3_000_000)
    refused_as_a_bomb(path, "elements", 2 << 30, 300 << 20)


def test_namespace_declarations_count_as_attributes(tmp_path, source):
    """Namespace declarations are no attributes to lxml's target parser: 200,000 runs declaring 26 each (315 KB of
    file) took 940 MB in python-docx's tree."""
    run = b"<w:r " + b" ".join(b'xmlns:%s="u"' % bytes([c]) for c in range(97, 123)) + b"/>"
    path = write_nodes_docx(tmp_path / "spaces.docx", source, run, 100_000)
    refused_as_a_bomb(path, "attributes", 2 << 30, 300 << 20)
