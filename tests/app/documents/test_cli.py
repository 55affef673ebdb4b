"""`chinwag chat --attach` and `chinwag replay` turns with attachments, on the tiny model."""

import json
import os
import re
import subprocess
import sys

import pytest

from app.cli.main import main
from tests.app.documents.files import BAD_INPUTS, make_bad, png_bytes, write_docx, write_pdf

PAGES = [f"Page {n}: the quick brown fox jumps over the lazy dog {n} times. " * 5 for n in range(1, 4)]


def _lines(out: str) -> list:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def _script(tmp_path, turns):
    (tmp_path / "docs").mkdir(exist_ok=True)
    write_pdf(tmp_path / "docs" / "report.pdf", PAGES)
    write_docx(tmp_path / "docs" / "notes.docx", "Notes", ["A cat and a long journey."])
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"system": "You are terse.", "turns": turns}))
    return path


def test_replay_attachments_reuse_the_cache(tmp_path, tiny_model_path, capsys):
    script = _script(
        tmp_path,
        [{"content": "What is on page 2?", "attachments": ["docs/report.pdf", "docs/notes.docx"]}, "And the cat?"],
    )
    argv = ["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "4"]
    assert main(argv) == 0
    first, second = _lines(capsys.readouterr().out)
    assert first["attachment_tokens"] > 200 and second["attachment_tokens"] == 0
    for key in ("prompt_ids", "reply_ids", "reused_tokens", "prefilled_tokens", "ttft_s", "prepared_tokens"):
        assert key in first
    held = len(first["prompt_ids"]) + len(first["reply_ids"])
    assert second["prompt_ids"][:held] == first["prompt_ids"] + first["reply_ids"]
    assert second["reused_tokens"] == held  # the documents are not read again
    # --no-cache keeps its meaning: every turn re-prefilled, documents included.
    assert main(argv + ["--no-cache"]) == 0
    again = _lines(capsys.readouterr().out)
    assert again[0]["prompt_ids"] == first["prompt_ids"] and again[1]["reused_tokens"] == 0


def test_replay_too_big_takes_the_passages_path(tmp_path, tiny_model_path, capsys):
    script = _script(tmp_path, [{"content": "What about page 3?", "attachments": ["docs/long.pdf"]}, "Page 1?"])
    write_pdf(tmp_path / "docs" / "long.pdf", PAGES * 4)
    argv = ["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "4", "--context-cap", "700"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    turns = _lines(captured.out)
    assert [t["turn"] for t in turns] == [0, 1]
    notes = [ln for ln in captured.err.splitlines() if "too big for the context" in ln]
    assert len(notes) == 1 and notes[0].startswith("chinwag: long.pdf is too big for the context (")
    assert 0 < turns[0]["attachment_tokens"] < 700
    # Every chunk scores alike here ("page"): the follow-up's pick is already in the first message.
    assert turns[1]["attachment_tokens"] == 0


def test_replay_bad_attachment_is_one_line(tmp_path, tiny_model_path, capsys):
    (tmp_path / "photo.png").write_bytes(png_bytes())
    script = _script(tmp_path, [{"content": "Hi", "attachments": ["photo.png"]}])
    assert main(["replay", str(script), "--model", str(tiny_model_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "turn 0: photo.png is an image: Chinwag reads text, PDF and DOCX" in err
    script = _script(tmp_path, [{"content": "Hi", "attachments": ["missing.pdf"]}])
    assert main(["replay", str(script), "--model", str(tiny_model_path)]) == 2
    assert "missing.pdf is gone" in capsys.readouterr().err


def test_chat_attach(tmp_path, tiny_model_path, chinwag_home):
    pdf = write_pdf(tmp_path / "report.pdf", PAGES)
    env = dict(os.environ, CHINWAG_HOME=str(chinwag_home))
    cmd = [sys.executable, "-m", "app.cli.main", "chat", "--model", str(tiny_model_path), "--max-tokens", "3"]
    proc = subprocess.run(
        cmd + ["--attach", str(pdf), "--temperature", "0"],
        input="What is on page 2?\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "attached report.pdf " in proc.stderr and "% of the context" in proc.stderr
    assert proc.stdout.count("tokens,") == 1
    from app.core.store import Store

    with Store() as store:  # saved like the window's chats: the question, with its document
        (summary,) = store.list_conversations()
        first = store.get_conversation(summary.id).messages[0]
    assert first.content == "What is on page 2?" and [a.name for a in first.attachments] == ["report.pdf"]
    assert "Page 2:" in first.attachments[0].text and len(first.attachments[0].sha256) == 64
    bad = subprocess.run(
        cmd + ["--attach", str(tmp_path)], input="", capture_output=True, text=True, timeout=120, env=env
    )
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "is a folder" in bad.stderr


@pytest.mark.parametrize("kind", BAD_INPUTS)
def test_chat_attach_bad_input_is_one_line_and_exit_2(tmp_path, tiny_model_path, chinwag_home, capsys, kind):
    path, line = make_bad(kind, tmp_path / "files")
    argv = ["chat", "--model", str(tiny_model_path), "--attach", str(path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(r"chinwag: error: " + line, err.strip()), err
    from app.core.store import Store

    with Store() as store:  # refused before anything was saved
        assert store.list_conversations() == []
