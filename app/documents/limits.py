"""The bounds on attached files: the one place they are written.

Untrusted files must not make extraction use unbounded memory or time: every limit here is
checked before the work it bounds (a size before reading, a ZIP's declared sizes before unpacking).
"""

# The largest file read at all (checked with fstat before reading, then again while reading).
MAX_FILE_BYTES = 128 * 1024 * 1024
# The most text kept from one document (about 2M tokens: far beyond any context, retrieval still works).
MAX_TEXT_CHARS = 8_000_000
# A PDF with more pages than this is refused before any page is read.
MAX_PDF_PAGES = 5_000
# A PDF is read in a child process (app/documents/pdf.py). Each page may take this much memory beyond what the
# open document holds, this long and this many characters (a dense page holds about 10,000): past any of them
# the file is refused. A page of nested form XObjects, or one stream inflating to 400 MB, took 3 GB in-process.
PDF_PAGE_BYTES = 256 * 1024 * 1024
PDF_PAGE_SECONDS = 30.0
PDF_PAGE_CHARS = 500_000
# Starting the reader and opening the file (pypdfium2's import included).
PDF_OPEN_SECONDS = 60.0
# All of a PDF's pages: each page just under its own bounds, 5,000 times over, would take hours (pdfium reads
# a plain page in about a millisecond: 5,000 pages take seconds).
PDF_TOTAL_SECONDS = 300.0
# A DOCX (a ZIP) whose members declare more than this uncompressed is a zip bomb; zipfile never
# inflates a member past its declared size, so checking the declarations bounds the work.
MAX_DOCX_UNCOMPRESSED = 256 * 1024 * 1024
MAX_DOCX_MEMBERS = 10_000
# The list of a ZIP's members is read before any member: its size is checked first (about 100 bytes a member).
MAX_DOCX_DIRECTORY_BYTES = MAX_DOCX_MEMBERS * 512
# What parsing a DOCX's XML may build (python-docx keeps a tree of every part it reads), counted first by a
# streaming parse that builds nothing. At these limits extraction peaks near 350 MB and takes about 15 s on
# a slow CPU; a 1,000-page report holds some 30,000 paragraphs and well under a million elements.
MAX_DOCX_ELEMENTS = 2_000_000
# Attributes cost python-docx's tree about as much as elements (some 240 bytes each): a 144 KB file of 200,000
# runs of 26 empty attributes took 1.3 GB. A real document has one or two an element.
MAX_DOCX_ATTRIBUTES = 2_000_000
MAX_DOCX_PARAGRAPHS = 200_000
# Files attached to one message.
MAX_FILES_PER_MESSAGE = 20
