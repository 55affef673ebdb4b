"""`chinwag conversations | export | import-conversation`: the store from a terminal.

app/cli/main.py calls add_commands(subparsers) and dispatches with `args.func(args)`,
which returns an exit code. No Qt here, except inside a pdf export.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.parser import OneLineParser
from app.transcripts.export import FORMATS  # cheap: app.transcripts.export loads Qt only to write a pdf
from engine.errors import ChinwagError

if TYPE_CHECKING:
    from app.core.store import Store


def add_commands(subparsers: argparse._SubParsersAction[OneLineParser]) -> None:
    p = subparsers.add_parser("conversations", help="list saved conversations")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--search", metavar="TEXT", default="", help="only those whose title or text contains TEXT")
    p.set_defaults(func=cmd_conversations)

    p = subparsers.add_parser("export", help="export a conversation to a file")
    p.add_argument("id", metavar="ID", help="conversation id (a unique prefix is enough)")
    p.add_argument("--format", "-f", choices=FORMATS, help="file format (default: from the -o extension)")
    p.add_argument("-o", "--output", metavar="PATH", required=True, help="file to write")
    p.set_defaults(func=cmd_export)

    p = subparsers.add_parser("import-conversation", help="import a conversation exported as JSON")
    p.add_argument("file", metavar="FILE.json")
    p.set_defaults(func=cmd_import)


def _open_store(read_only: bool = False) -> Store:
    from app.core.store import Store

    store = Store(read_only=read_only)
    if store.notice:
        print(f"chinwag: note: {store.notice}", file=sys.stderr)
    return store


def _fail(error: Exception | str) -> int:
    print(f"chinwag: error: {error}", file=sys.stderr)
    return 2


def cmd_conversations(args: argparse.Namespace) -> int:
    try:
        store = _open_store(read_only=True)
        try:
            rows = store.list_conversations(search=args.search)
        finally:
            store.close()
    except ChinwagError as e:
        return _fail(e)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "id": r.id,
                        "title": r.title,
                        "messages": r.message_count,
                        "updated_at": r.updated_at,
                        "updated": _when(r.updated_at),
                        "model_id": r.model_id,
                        **({"snippet": r.snippet} if args.search else {}),
                    }
                    for r in rows
                ],
                ensure_ascii=False,
                indent=2,
            )
        )
        return 0
    if not rows:
        print("no conversations match" if args.search else "no conversations yet")
        return 0
    ids = _short_ids([r.id for r in rows])
    table = [("ID", "TITLE", "MESSAGES", "UPDATED")] + [
        (sid, _clip(r.title, 50), str(r.message_count), _when(r.updated_at)) for sid, r in zip(ids, rows)
    ]
    widths = [max(_width(row[c]) for row in table) for c in range(3)]
    for row in table:
        cells = [_pad(row[c], widths[c], right=(c == 2)) for c in range(3)]
        print("  ".join(cells + [row[3]]))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    fmt = args.format or Path(args.output).suffix.lower().lstrip(".").replace("markdown", "md")
    if fmt not in FORMATS:
        return _fail(f"cannot tell the format from {args.output}; pass --format ({'|'.join(FORMATS)})")
    try:
        from app.transcripts.export import export_conversation

        store = _open_store(read_only=True)
        try:
            conv = store.get_conversation(store.resolve_conversation_id(args.id))
        finally:
            store.close()
        path = export_conversation(conv, fmt, args.output)
    except ChinwagError as e:
        return _fail(e)
    print(path)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    try:
        from app.transcripts.json_import import import_conversation

        store = _open_store()
        try:
            conv = import_conversation(store, args.file)
        finally:
            store.close()
    except ChinwagError as e:
        return _fail(e)
    print(conv.id)
    return 0


def _short_ids(ids: list[str], minimum: int = 8) -> list[str]:
    """The shortest prefixes (at least 8 characters) that tell the listed ids apart."""
    length = minimum
    while length < max((len(i) for i in ids), default=0) and len({i[:length] for i in ids}) < len(ids):
        length += 1
    return [i[:length] for i in ids]


def _when(ts: float) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))
    except (OverflowError, OSError, ValueError, TypeError):  # a stored time out of the calendar
        return "-"


def _char_width(ch: str) -> int:
    if unicodedata.combining(ch) or ch in "\u200d\ufe0f":
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def _width(text: str) -> int:
    return sum(_char_width(c) for c in text)


def _clip(text: str, limit: int) -> str:
    """One line, at most limit terminal columns (CJK and emoji count as two)."""
    # Control characters (a pasted escape sequence) must not reach the terminal.
    text = " ".join("".join(" " if unicodedata.category(c) == "Cc" else c for c in text).split())
    if _width(text) <= limit:
        return text
    out, used = "", 0
    for ch in text:
        if used + _char_width(ch) > limit - 1:
            break
        out, used = out + ch, used + _char_width(ch)
    return out + "…"


def _pad(text: str, width: int, right: bool = False) -> str:
    space = " " * (width - _width(text))
    return space + text if right else text + space


def main(argv: list[str] | None = None) -> int:
    """Run these commands alone: `python -m app.cli.transcripts conversations`."""
    parser = OneLineParser(prog="chinwag")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
