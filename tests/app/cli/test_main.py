"""The `chinwag` command line: models, replay, chat, and its one-line errors."""

import json
import os
import subprocess
import sys

import pytest

from app.cli.main import main


def lines(out: str) -> list:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def write_script(tmp_path, turns, system="You are terse."):
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"system": system, "turns": turns}))
    return path


def test_replay_reuses_the_cache_across_turns(tmp_path, tiny_model_path, capsys):
    script = write_script(tmp_path, ["Hello", "Tell me more", "And after that?"])
    code = main(
        ["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "6", "--kv-initial-capacity", "8"]
    )
    assert code == 0
    turns = lines(capsys.readouterr().out)
    assert [t["turn"] for t in turns] == [0, 1, 2]
    for key in (
        "reply",
        "prompt_ids",
        "reply_ids",
        "reused_tokens",
        "prefilled_tokens",
        "ttft_s",
        "decode_tps",
        "kv_capacity",
        "kv_offset",
    ):
        assert key in turns[0]
    for prev, cur in zip(turns, turns[1:]):
        held = len(prev["prompt_ids"]) + len(prev["reply_ids"])
        assert cur["prompt_ids"][:held] == prev["prompt_ids"] + prev["reply_ids"]
        assert cur["reused_tokens"] == held
        assert cur["prefilled_tokens"] == len(cur["prompt_ids"]) - held
    assert turns[-1]["kv_capacity"] >= turns[-1]["kv_offset"] > 8


def test_replay_no_cache_prefills_everything(tmp_path, tiny_model_path, capsys):
    script = write_script(tmp_path, ["Hello", "Again"])
    assert main(["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "4", "--no-cache"]) == 0
    turns = lines(capsys.readouterr().out)
    assert all(t["reused_tokens"] == 0 and t["prefilled_tokens"] == len(t["prompt_ids"]) for t in turns)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe not utf-8", "is not UTF-8"),
        (b"{broken", "is not valid JSON"),
        (b'{"turns": []}', "non-empty list"),
        (b'["hello"]', "must be an object"),
    ],
)
def test_replay_bad_script_is_one_line_and_exit_2(tmp_path, tiny_model_path, capsys, content, message):
    script = tmp_path / "bad.json"
    script.write_bytes(content)
    assert main(["replay", str(script), "--model", str(tiny_model_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(script) in err


def test_replay_unknown_model_and_long_prompt(tmp_path, tiny_model_path, capsys, chinwag_home):
    script = write_script(tmp_path, ["hi"])
    assert main(["replay", str(script), "--model", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    long = write_script(tmp_path, ["word " * 200])
    assert main(["replay", str(long), "--model", str(tiny_model_path), "--context-cap", "32"]) == 2
    err = capsys.readouterr().err
    assert "context limit is 32" in err and err.count("\n") == 1
    # Nothing half-written in the data dir by the failures.
    assert not [p for p in (chinwag_home / "models").glob("*")] if (chinwag_home / "models").exists() else True


def test_models_json_lists_the_starter_model(capsys):
    assert main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    starter = [m for m in models if m["id"] == "smollm2-135m-instruct"]
    assert starter and {"id", "name", "path", "status"} <= set(starter[0])


def test_chat_reads_stdin_and_streams_replies(tiny_model_path, chinwag_home):
    env = dict(os.environ, CHINWAG_HOME=str(chinwag_home))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli.main",
            "chat",
            "--model",
            str(tiny_model_path),
            "--max-tokens",
            "5",
            "--temperature",
            "0",
        ],
        input="Hello\n/new\nSecond chat\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("tokens,") == 2
    assert "import PySide6" not in proc.stderr


def test_subcommands_never_import_qt(tiny_model_path, tmp_path, chinwag_home):
    script = write_script(tmp_path, ["Hi"])
    code = (
        "import sys; from app.cli.main import main; "
        f"rc = main(['replay', {str(script)!r}, '--model', {str(tiny_model_path)!r}, '--max-tokens', '2']); "
        "main(['models']); "
        "assert not [m for m in sys.modules if m.startswith('PySide6')], 'Qt imported'; sys.exit(rc)"
    )
    env = dict(os.environ, CHINWAG_HOME=str(chinwag_home))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr


def test_import_gguf_then_replay_it_by_id(tmp_path, tiny_model_path, capsys, chinwag_home):
    from tests.engine.models.gguf.test_importer import write_tiny_gguf

    gguf = write_tiny_gguf(tiny_model_path, tmp_path / "Tiny-Llama.F32.gguf")
    assert main(["import", str(gguf)]) == 0
    out = capsys.readouterr().out
    assert "imported" in out
    assert main(["models", "--json"]) == 0
    imported = [m for m in json.loads(capsys.readouterr().out) if m["source"] == "imported"]
    assert len(imported) == 1 and imported[0]["status"] == "ready"
    script = write_script(tmp_path, ["Hi"])
    # A GGUF path works as --model too (already imported: reused, not imported again).
    for model in (imported[0]["id"], str(gguf)):
        assert main(["replay", str(script), "--model", model, "--max-tokens", "2"]) == 0
        assert lines(capsys.readouterr().out)[0]["turn"] == 0
    assert len(list((chinwag_home / "models").iterdir())) == 1


@pytest.mark.parametrize("content", [b"", b"GGUF\x03\x00\x00\x00 truncated", b"not a gguf at all"])
def test_import_bad_file_is_one_line_and_writes_nothing(tmp_path, capsys, chinwag_home, content):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    assert main(["import", str(bad)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("chinwag: error: ") and str(bad) in err[-1]
    assert sum(line.startswith("chinwag:") for line in err) == 1  # the rest is [progress]
    models = chinwag_home / "models"
    assert not models.exists() or not any(models.iterdir())


def test_import_missing_file(tmp_path, capsys):
    assert main(["import", str(tmp_path / "missing.gguf")]) == 2
    assert "missing.gguf" in capsys.readouterr().err
