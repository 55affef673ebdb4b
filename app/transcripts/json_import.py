"""Import a json export: untrusted input, checked whole before anything is written.

A file from anywhere (another machine, another version, a hand edit) becomes a new conversation
only when every field has the type, range and encoding the store and the window expect; otherwise
one ChinwagError names the file and the field. The format is app/transcripts/export.py's to_json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import stat
import time
from pathlib import Path
from typing import Any

from app.core import attachments as attached
from app.core.chats import UNSAVED
from app.core.message_tree import active_path
from app.core.messages import tool_result_from_json
from app.core.settings import settings_problems
from app.core.sizes import format_bytes
from app.core.store import STATUSES, Conversation, Message, Store, StoredToolResult
from app.transcripts.export import FORMAT_MARKER, FORMAT_VERSION, ROLE_NAMES
from engine.atomic import describe_kind
from engine.errors import ChinwagError
from engine.types import ChatMessage, Role, ToolCall

MAX_IMPORT_BYTES = 512 << 20
MAX_TITLE_CHARS = 10_000  # the sidebar shows one line of it
MAX_DEPTH = 32  # an export is 4 levels deep; stats and settings add little
MAX_TIMESTAMP = 253402300799  # 9999-12-31: every later display of the time still works


def import_conversation(store: Store, path: str | Path) -> Conversation:
    """Read a json export into the store as a new conversation (new id, all else equal).

    Everything is checked before anything is written, and the write is one transaction.
    """
    path = Path(path).expanduser()
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode):  # a named pipe would wait forever, a device never ends
            raise ChinwagError(f"cannot import {path}: it is {describe_kind(st.st_mode)}, not a file")
        if st.st_size > MAX_IMPORT_BYTES:
            raise ChinwagError(
                f"cannot import {path}: it is over {format_bytes(MAX_IMPORT_BYTES)}, larger than any conversation export"
            )
        raw = path.read_bytes()
    except OSError as e:
        raise ChinwagError(f"cannot import {path}: {e.strerror or e}") from e
    except ValueError as e:  # a NUL byte in the name
        raise ChinwagError(f"cannot import {str(path)!r}: {e}") from e
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ChinwagError(f"cannot import {path}: not UTF-8 text (bad byte at offset {e.start})") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ChinwagError(f"cannot import {path}: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from e
    except RecursionError as e:
        raise ChinwagError(f"cannot import {path}: its JSON is nested too deeply to be a conversation export") from e
    try:
        conv = _conversation_from_json(data)
    except ValueError as e:
        raise ChinwagError(f"cannot import {path}: {e}") from e
    return store.insert_conversation(conv)


def _conversation_from_json(data: object) -> Conversation:
    if not isinstance(data, dict) or data.get("format") != FORMAT_MARKER:
        raise ValueError('not a Chinwag conversation export (no "format": "chinwag-conversation")')
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValueError("missing or invalid format version")
    if version > FORMAT_VERSION:
        raise ValueError(f"made by a newer Chinwag (format version {version}, this one reads {FORMAT_VERSION})")
    c = data.get("conversation")
    if not isinstance(c, dict):
        raise ValueError('"conversation" is missing or not an object')
    now = time.time()
    conv = Conversation(
        id="",
        title=_field(c, "title", str, "conversation", default="Imported chat"),
        created_at=_number(c, "created_at", "conversation", now),
        updated_at=_number(c, "updated_at", "conversation", now),
        model_id=_field(c, "model_id", str, "conversation", default=""),
        settings=_field(c, "settings", dict, "conversation", default={}),
    )
    if len(conv.title) > MAX_TITLE_CHARS or len(conv.model_id) > MAX_TITLE_CHARS:
        raise ValueError(f"conversation.title or model_id is over {MAX_TITLE_CHARS} characters")
    problems = settings_problems(conv.settings)
    if problems:
        raise ValueError("conversation." + "; ".join(problems[:3]))
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise ValueError('"messages" is missing or not a list')
    tree = data.get("tree")
    if tree is not None:
        conv.tree = _tree_from_json(tree, now)
    for i, m in enumerate(messages):
        conv.messages.append(_message_from_json(m, f"messages[{i}]", i, now))
    if conv.tree:
        conv.messages = active_path(conv.tree)  # the tree is the whole truth; "messages" its shown path
    _check_text(data)
    return conv


def _message_from_json(m: object, where: str, index: int, now: float) -> Message:
    if not isinstance(m, dict):
        raise ValueError(f"{where} is not an object")
    status = _field(m, "status", str, where, default="complete")
    if status not in STATUSES:
        raise ValueError(f"{where}.status {status!r} is not one of {', '.join(STATUSES)}")
    stats = m.get("stats")
    if stats is not None and not isinstance(stats, dict):
        raise ValueError(f"{where}.stats is not an object")
    role = _field(m, "role", str, where)
    if role not in ROLE_NAMES:
        raise ValueError(f"{where}.role {role!r:.40} is not one of {', '.join(ROLE_NAMES)}")
    calls, result = _tool_round(m, role, where)
    return Message(
        id=index,
        conversation_id=UNSAVED,
        position=index,
        role=role,
        content=_field(m, "content", str, where),
        status=status,
        created_at=_number(m, "created_at", where, now),
        model_id=_field(m, "model_id", str, where, default=""),
        stats=stats,
        attachments=attached.from_json(m.get("attachments"), where),
        tool_calls=calls,
        tool_result=result,
    )


def _tool_round(m: dict[str, Any], role: str, where: str) -> tuple[tuple[ToolCall, ...], StoredToolResult | None]:
    """A message's tool calls (a reply's) or its result's call (a tool message's), as export.py's _tool_json
    writes them. Exports before schema 5 kept them in stats: the store takes them from there."""
    shape = {k: m[k] for k in ("tool_calls", "tool_call_id", "name") if m.get(k) is not None}
    if not shape and m.get("tool") is None:
        return (), None
    try:
        typed = ChatMessage.from_openai({"role": role, "content": "", **shape}, where)
    except ChinwagError as e:
        raise ValueError(str(e)) from e
    if role != Role.TOOL:
        return typed.tool_calls, None
    run = tool_result_from_json(m.get("tool"), where)
    extra = dataclasses.asdict(run) if run is not None else {}
    return (), StoredToolResult(**{**extra, "tool_call_id": typed.tool_call_id, "name": typed.name})


def _tree_from_json(tree: object, now: float) -> list[Message]:
    """Every version of every message; a parent must come before its children."""
    if not isinstance(tree, list):
        raise ValueError('"tree" is not a list')
    out = []
    for i, m in enumerate(tree):
        where = f"tree[{i}]"
        msg = _message_from_json(m, where, i, now)
        parent = m.get("parent")
        if parent is not None and (isinstance(parent, bool) or not isinstance(parent, int) or not 0 <= parent < i):
            raise ValueError(f"{where}.parent is not the index of an earlier message")
        active = m.get("active", True)
        if not isinstance(active, bool):
            raise ValueError(f"{where}.active is not true or false")
        msg.parent_id, msg.active = parent, active
        out.append(msg)
    return out


_MISSING = object()


def _field(obj: dict[str, Any], key: str, kind: type, where: str, default: Any = _MISSING) -> Any:
    value = obj.get(key, _MISSING)
    if value is _MISSING or (value is None and default is not _MISSING):
        if default is _MISSING:
            raise ValueError(f"{where}.{key} is missing")
        return default
    if not isinstance(value, kind):
        raise ValueError(f"{where}.{key} is not {'text' if kind is str else 'an object'}")
    return value


def _number(obj: dict[str, Any], key: str, where: str, default: float) -> float:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{where}.{key} is not a finite number")
    if not 0 <= value <= MAX_TIMESTAMP:
        raise ValueError(f"{where}.{key} {value!r:.40} is not a time between 1970 and 9999")
    return value


def _check_text(value: object) -> None:
    """JSON may spell lone surrogates (\\ud800) that no UTF-8 database can store; and nothing
    in an export is nested deeper than MAX_DEPTH, so reading it back from the store is safe."""
    stack = [(value, 0)]  # a loop, not recursion
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"it is nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                near = value[max(0, e.start - 20) : e.start]
                raise ValueError(f"text contains an invalid character (lone surrogate) near {near!r}") from e
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in (*value.keys(), *value.values()))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
