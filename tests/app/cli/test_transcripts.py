"""`chinwag conversations | export | import-conversation` through main(argv) and a subprocess."""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from app.cli.transcripts import main
from app.core.store import Store

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def convs():
    with Store() as store:
        a = store.create_conversation(model_id="smollm2")
        store.add_message(a.id, "user", "Recipe for pancakes 🥞")
        store.add_message(a.id, "assistant", "Flour, eggs, **milk**.")
        b = store.create_conversation()
        store.add_message(b.id, "user", "שלום עולם 你好世界 — a very long title that will not fit in the table at all")
        return a.id, b.id


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_conversations_empty(capsys):
    assert run(capsys, "conversations") == (0, "no conversations yet\n", "")


def test_conversations_table(capsys, convs):
    code, out, err = run(capsys, "conversations")
    lines = out.splitlines()
    assert code == 0 and err == ""
    assert lines[0].split() == ["ID", "TITLE", "MESSAGES", "UPDATED"]
    assert lines[1].startswith(convs[1][:8]) and "…" in lines[1]  # newest first, long title clipped
    assert lines[2].startswith(convs[0][:8]) and "Recipe for pancakes 🥞" in lines[2] and " 2  " in lines[2]


def test_conversations_json_and_search(capsys, convs):
    code, out, _ = run(capsys, "conversations", "--json")
    rows = json.loads(out)
    assert code == 0 and [r["id"] for r in rows] == [convs[1], convs[0]]
    assert rows[1] | {"updated_at": 0, "updated": ""} == {
        "id": convs[0],
        "title": "Recipe for pancakes 🥞",
        "messages": 2,
        "updated_at": 0,
        "updated": "",
        "model_id": "smollm2",
    }
    code, out, _ = run(capsys, "conversations", "--json", "--search", "MILK")
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [convs[0]] and "milk" in rows[0]["snippet"]
    assert run(capsys, "conversations", "--search", "nothing like this")[1] == "no conversations match\n"


@pytest.mark.parametrize("fmt", ["md", "json", "html", "txt"])
def test_export_by_prefix(capsys, convs, tmp_path, fmt):
    target = tmp_path / f"out.{fmt}"
    code, out, err = run(capsys, "export", convs[0][:6], "--format", fmt, "-o", str(target))
    assert (code, out.strip(), err) == (0, str(target), "")
    assert "pancakes" in target.read_text(encoding="utf-8")


def test_export_infers_the_format(capsys, convs, tmp_path):
    assert run(capsys, "export", convs[0], "-o", str(tmp_path / "x.html"))[0] == 0
    assert (tmp_path / "x.html").read_text().startswith("<!DOCTYPE html>")
    code, _, err = run(capsys, "export", convs[0], "-o", str(tmp_path / "x.docx"))
    assert code == 2 and err.startswith("chinwag: error: cannot tell the format") and err.count("\n") == 1


def test_export_errors(capsys, convs, tmp_path):
    code, _, err = run(capsys, "export", "zzzz", "-f", "md", "-o", str(tmp_path / "x.md"))
    assert code == 2 and err == "chinwag: error: no conversation with id zzzz\n"
    code, _, err = run(capsys, "export", convs[0], "-f", "md", "-o", str(tmp_path / "missing" / "x.md"))
    assert code == 2 and err.startswith("chinwag: error: cannot write") and err.count("\n") == 1
    assert not (tmp_path / "missing").exists()


def test_ambiguous_prefix(capsys, tmp_path):
    with Store() as store:
        ids = [store.create_conversation().id for _ in range(17)]  # 17 ids, 16 hex digits: two share one
    shared = Counter(i[0] for i in ids).most_common(1)[0][0]
    code, _, err = run(capsys, "export", shared, "-f", "md", "-o", str(tmp_path / "x.md"))
    assert code == 2 and "ambiguous" in err
    assert not (tmp_path / "x.md").exists()


def test_import_conversation(capsys, convs, tmp_path):
    target = tmp_path / "a.json"
    assert run(capsys, "export", convs[0], "-o", str(target))[0] == 0
    code, out, err = run(capsys, "import-conversation", str(target))
    new_id = out.strip()
    assert code == 0 and err == "" and new_id not in convs
    with Store() as store:
        assert [m.content for m in store.get_conversation(new_id).messages] == [
            "Recipe for pancakes 🥞",
            "Flour, eggs, **milk**.",
        ]


def test_import_errors(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\x89PNG not json")
    code, out, err = run(capsys, "import-conversation", str(bad))
    assert (code, out) == (2, "") and err.startswith("chinwag: error: cannot import") and str(bad) in err
    assert err.count("\n") == 1
    code, _, err = run(capsys, "import-conversation", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot import" in err
    assert run(capsys, "conversations")[1] == "no conversations yet\n"


def test_read_only_store_is_announced_and_can_export(capsys, convs, chinwag_home, tmp_path):
    import sqlite3

    from app.core.store import SCHEMA_VERSION

    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    raw.close()
    code, out, err = run(capsys, "export", convs[0], "-o", str(tmp_path / "x.md"))
    assert code == 0 and err.startswith("chinwag: note:") and "newer" in err
    code, _, err = run(capsys, "import-conversation", str(tmp_path / "x.md"))
    assert code == 2 and "chinwag: error:" in err


def test_pdf_export_from_a_terminal_without_display(convs, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    target = tmp_path / "chat.pdf"
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.transcripts", "export", convs[0][:8], "--format", "pdf", "-o", str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert target.read_bytes().startswith(b"%PDF")


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["export", "abc", "--format", "docx", "-o", "x"])
    assert info.value.code == 2


def test_a_reader_that_leaves_early_is_not_a_bug(convs):
    """`chinwag conversations | head -1`: the listing stops quietly (status 141, as a shell shows
    for a writer whose reader left), no "a bug in Chinwag" line and nothing in the log."""
    from app.cli.main import BROKEN_PIPE_STATUS
    from engine import paths
    from engine.log import LOG_FILE

    read, write = os.pipe()
    os.close(read)  # the reader has left before the first line is written
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "conversations"],
        cwd=ROOT,
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    os.close(write)
    assert (proc.returncode, proc.stderr) == (BROKEN_PIPE_STATUS, "")
    log = paths.data_dir() / LOG_FILE
    assert "bug" not in (log.read_text() if log.exists() else "")
