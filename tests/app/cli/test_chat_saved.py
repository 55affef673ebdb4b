"""`chinwag chat` keeps its chats like the window does (unless --no-save), and says how a
model load goes on one terminal line, or not at all when stderr is not a terminal."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

from app.cli.main import main
from app.cli.progress import TerminalProgress
from app.core.store import Store
from app.core.turns import PROMPT_KEY, prompt_digest
from engine.types import LoadProgress

ROOT = Path(__file__).resolve().parents[3]


def chat(chinwag_home, model, text, *flags):
    env = dict(os.environ, CHINWAG_HOME=str(chinwag_home))
    argv = [sys.executable, "-m", "app.cli.main", "chat", "--model", str(model), "--max-tokens", "4"]
    proc = subprocess.run(
        argv + ["--temperature", "0", *flags],
        input=text,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_a_terminal_chat_is_saved_and_listed(tiny_model_path, chinwag_home, capsys):
    chat(chinwag_home, tiny_model_path, "Hello there\nAnd again\n/new\nSecond chat\n", "--system", "Be brief.")
    with Store() as store:
        convs = store.list_conversations()
        assert sorted(c.title for c in convs) == ["Hello there", "Second chat"]
        first = store.get_conversation(next(c.id for c in convs if c.title == "Hello there"))
        assert [m.role for m in first.messages] == ["user", "assistant", "user", "assistant"]
        assert first.messages[1].stats["generated_tokens"] >= 1 and first.settings["system_prompt"] == "Be brief."
        assert first.messages[3].stats[PROMPT_KEY] == prompt_digest("Be brief.")  # what exports place it by
    assert main(["conversations", "--json"]) == 0
    assert {c["title"] for c in json.loads(capsys.readouterr().out)} == {"Hello there", "Second chat"}


def test_no_save_keeps_the_chat_out_of_the_store(tiny_model_path, chinwag_home):
    chat(chinwag_home, tiny_model_path, "Private\n", "--no-save")
    with Store() as store:
        assert store.list_conversations() == []
    assert not list((chinwag_home / "kv").glob("*/*.safetensors"))  # nor its cache


def test_the_stderr_of_a_script_gets_no_progress_lines(tiny_model_path, chinwag_home):
    proc = chat(chinwag_home, tiny_model_path, "Hi\n", "--no-save")
    assert "Loading" not in proc.stderr and "[" not in proc.stderr, proc.stderr


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_is_one_line_that_updates():
    out = Terminal()
    progress = TerminalProgress(out, clock=lambda: 0.0)  # all at one instant: only what must be drawn is
    for done in range(0, 101):
        progress(LoadProgress("Loading weights", done, 100))
    progress.finish()
    text = out.getvalue()
    assert "\n" not in text  # one line, redrawn in place
    assert "\r\033[KLoading weights 0%" in text and "Loading weights 100%" in text
    assert text.count("\r") == 3  # 0%, then 100% (a stage's end is always drawn), then the clearing
    assert text.endswith("\r\033[K")  # cleared for what follows


def test_progress_off_a_terminal_prints_nothing():
    out = io.StringIO()
    progress = TerminalProgress(out)
    progress(LoadProgress("Loading weights", 1, 2))
    progress.finish()
    assert out.getvalue() == ""


def test_help_says_plain_chinwag_opens_the_window_and_version_is_there(capsys):
    try:
        main(["--help"])
    except SystemExit as e:
        assert e.code == 0
    assert "With no command, `chinwag` opens the window" in " ".join(capsys.readouterr().out.split())
    try:
        main(["--version"])
    except SystemExit as e:
        assert e.code == 0
    assert capsys.readouterr().out.startswith("chinwag ")


def test_continue_writes_on_after_a_reply_cut_at_max_tokens_and_saves_it_whole(tiny_model_path, chinwag_home):
    proc = chat(chinwag_home, tiny_model_path, "Tell me a long story\n/continue\n/continue\n")
    assert proc.stdout.count("length]") == 3  # the reply and two continuations, each cut at 4 tokens
    assert "nothing to continue" not in proc.stderr
    with Store() as store:
        [conv] = store.list_conversations()
        messages = store.get_conversation(conv.id).messages
        assert [m.role for m in messages] == ["user", "assistant"]  # one reply, written on twice
        assert messages[1].stats["generated_tokens"] == 12
    # Twelve tokens at once say the same.
    chat(chinwag_home, tiny_model_path, "Tell me a long story\n", "--max-tokens", "12")
    with Store() as store:
        replies = [store.get_conversation(c.id).messages[1].content for c in store.list_conversations()]
    assert len(replies) == 2 and replies[0] == replies[1]


def test_continue_without_a_cut_reply_says_so_and_the_chat_goes_on(tiny_model_path, chinwag_home):
    proc = chat(chinwag_home, tiny_model_path, "/continue\nHello\n")
    assert "/continue: the last reply did not stop at max tokens" in proc.stderr
    assert "length]" in proc.stdout or "stop]" in proc.stdout  # the next message was answered
