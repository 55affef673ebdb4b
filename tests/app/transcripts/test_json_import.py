"""Importing a json export: a bad file is refused in one line that names it, and nothing is written."""

import json

import pytest

from app.transcripts.json_import import import_conversation
from engine.errors import ChinwagError


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


GOOD = {
    "format": "chinwag-conversation",
    "version": 1,
    "conversation": {"title": "t"},
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe{\x00}\x00", "not UTF-8"),
        ('"just a string"', "not a Chinwag conversation export"),
        ({**GOOD, "format": "something-else"}, "not a Chinwag conversation export"),
        ({**GOOD, "version": 99}, "newer"),
        ({**GOOD, "version": "1"}, "version"),
        ({k: v for k, v in GOOD.items() if k != "messages"}, "messages"),
        ({**GOOD, "conversation": []}, "conversation"),
        ({**GOOD, "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({**GOOD, "messages": [{"role": "user"}]}, "messages[0].content is missing"),
        (
            {**GOOD, "messages": [GOOD["messages"][0], {"role": "user", "content": "x", "status": "odd"}]},
            "messages[1].status",
        ),
        ({**GOOD, "messages": [{"role": "user", "content": "x", "created_at": "yesterday"}]}, "created_at"),
        ({**GOOD, "messages": [{"role": "user", "content": "x", "stats": [1]}]}, "stats"),
        (
            '{"format": "chinwag-conversation", "version": 1, "conversation": {"title": "t"},'
            ' "messages": [{"role": "user", "content": "bad \\ud800"}]}',
            "surrogate",
        ),
        (
            '{"format": "chinwag-conversation", "version": 1, "conversation": {"title": "t",'
            ' "created_at": NaN}, "messages": []}',
            "finite",
        ),
    ],
)
def test_import_rejects_bad_files_and_writes_nothing(store, tmp_path, content, problem):
    if isinstance(content, dict):
        content = json.dumps(content)
    path = _write(tmp_path, "bad.json", content)
    with pytest.raises(ChinwagError) as info:
        import_conversation(store, path)
    message = str(info.value)
    assert str(path) in message and problem in message and "\n" not in message
    assert store.list_conversations() == []


@pytest.mark.parametrize("make", [lambda p: p / "missing.json", lambda p: p])
def test_import_of_missing_file_or_folder(store, tmp_path, make):
    with pytest.raises(ChinwagError, match="cannot import"):
        import_conversation(store, make(tmp_path))
