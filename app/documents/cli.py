"""Documents on the command line: `chinwag chat --attach FILE` and replay turns with "attachments"."""

import asyncio
import sys
from pathlib import Path

from app.core.document_block import Attachment, message_content
from app.documents import limits
from app.documents.extract import extract
from app.documents.turn import Turn, prepare
from engine.errors import ChinwagError
from engine.protocol import EngineAPI
from engine.types import GenerationParams


def read_all(paths: list[str]) -> list[Attachment]:
    """Extract every file now (bad input: ChinwagError, one line naming the file)."""
    if len(paths) > limits.MAX_FILES_PER_MESSAGE:
        raise ChinwagError(f"too many files for one message: {len(paths)}, the limit is {limits.MAX_FILES_PER_MESSAGE}")
    out = []
    for path in paths:
        doc = extract(Path(path).expanduser())
        out.append(Attachment(doc.name, doc.text, doc.kind, size=doc.size, sha256=doc.sha256))
    return out


async def read_ahead(
    engine: EngineAPI, conv: str, messages: list, pending: list[Attachment], params: GenerationParams
) -> asyncio.Task | None:
    """Start reading the documents into the cache while the question is typed (if they fit whole).

    The caller keeps the task (asyncio holds only a weak reference); sending preempts it.
    """
    if not pending:
        return None
    turn = await prepare(engine, messages, "", pending, params, [])
    if turn.notes:  # too big: the passages depend on the question, so nothing can be read ahead
        print("attached " + ", ".join(a.name for a in pending) + ": " + "; ".join(turn.notes), file=sys.stderr)
        return None
    print(f"attached {turn.summary}: reading it while you type", file=sys.stderr)
    draft = messages + [{"role": "user", "content": message_content("", pending)}]
    return asyncio.ensure_future(engine.prefill(conv, draft, params))


def stored(turn: Turn) -> list:
    """What the store keeps of a turn's documents; rebuilt, they give the same message text."""
    return turn.stored()


def script_turns(script_path: str | Path, turns: list) -> list[tuple[str, list[Attachment]]]:
    """Replay turns: a string, or {"content": "...", "attachments": ["relative/path.pdf", ...]}.

    Paths are relative to the script; every document is read before the model loads.
    """
    base = Path(script_path).parent
    out: list = []
    for i, turn in enumerate(turns):
        if isinstance(turn, str):
            out.append((turn, []))
            continue
        content, files = turn.get("content"), turn.get("attachments", [])
        if not isinstance(content, str) or not content.strip():
            raise ChinwagError(f'script {script_path}: turn {i} needs a non-empty string "content"')
        if not isinstance(files, list) or not all(isinstance(f, str) and f for f in files):
            raise ChinwagError(f'script {script_path}: turn {i}: "attachments" must be a list of file paths')
        unknown = set(turn) - {"content", "attachments"}
        if unknown:
            raise ChinwagError(f"script {script_path}: turn {i} has unknown keys: {', '.join(sorted(unknown))}")
        try:
            out.append((content, read_all([base / f for f in files])))
        except ChinwagError as e:
            raise ChinwagError(f"script {script_path}: turn {i}: {e}") from None
    return out
