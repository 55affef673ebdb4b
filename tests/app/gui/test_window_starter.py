"""The exact-history and window promises end to end on the starter model (short prompts, few tokens)."""

import json

import pytest

from app.cli.main import main
from engine.local import loading
from engine.models import registry
from engine.models.folders import STARTER_ID
from tests.engine.test_api import reference

pytestmark = pytest.mark.starter


@pytest.fixture(scope="module")
def starter_home(tmp_path_factory):
    return tmp_path_factory.mktemp("starter-home")


def replay(tmp_path, capsys, system, turns, *options):
    script = tmp_path / "chat.json"
    script.write_text(json.dumps({"system": system, "turns": turns}))
    assert main(["replay", str(script), "--model", STARTER_ID, *options]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_reply_quoted_by_the_user_before_it_keeps_the_whole_history_reused(
    starter_home, monkeypatch, tmp_path, capsys
):
    # The example: the old splice reused 19 of 36 cached tokens at turn 2.
    monkeypatch.setenv("CHINWAG_HOME", str(starter_home))
    turns = replay(
        tmp_path,
        capsys,
        "You are a friendly assistant.",
        ["Repeat after me exactly: I like green apples.", "Why is the sky blue?"],
        "--max-tokens",
        "8",
    )
    assert "green apples" in turns[0]["reply"]
    held = len(turns[0]["prompt_ids"]) + len(turns[0]["reply_ids"])
    assert turns[1]["reused_tokens"] == held
    assert turns[1]["prompt_ids"][:held] == turns[0]["prompt_ids"] + turns[0]["reply_ids"]


def test_a_chat_that_slides_its_window_twice_stays_exact_on_every_turn(starter_home, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("CHINWAG_HOME", str(starter_home))
    # Five turns, each read again fresh by mlx-lm: the cap is met every other turn (a turn adds about 18
    # tokens, a slide leaves about 20), so the window grows, slides, grows and slides again.
    cap = 48
    questions = ["Hi!", "A color?", "A fruit?", "A city?", "A tree?"]
    turns = replay(tmp_path, capsys, "Be brief.", questions, "--max-tokens", "4", "--context-cap", str(cap))
    path, _ = registry.resolve_model(STARTER_ID)
    model, tokenizer = loading.load(path)
    slides = 0
    for i, t in enumerate(turns):
        assert t["reply_ids"] == reference(model, t["prompt_ids"], 4, tokenizer.eos_token_ids), f"turn {i}"
        assert t["finish_reason"] in ("stop", "length") and t["kv_offset"] <= cap
        if i:
            prev = turns[i - 1]
            held = len(prev["prompt_ids"]) + len(prev["reply_ids"])
            if t["reused_tokens"] < held:
                slides += 1
                assert t["dropped_messages"] > prev["dropped_messages"]
            else:
                assert t["prompt_ids"][:held] == prev["prompt_ids"] + prev["reply_ids"]
    assert slides >= 2
