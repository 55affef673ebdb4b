"""Point 6 of issue 9: `chat` says how far it has read a long prompt before the first token."""

import json

from engine import PrefillProgress, TextDelta, TurnStats
from engine.local import generation
from tests.engine.test_api import GREEDY, reference


async def events_of(engine, conv, messages, params=GREEDY):
    return [ev async for ev in engine.chat(conv, messages, params)]


def test_long_prefill_reports_progress_before_the_first_token(engine_with, tiny_model):
    model, tokenizer = tiny_model
    long = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 40}]

    async def body(engine):
        first = await events_of(engine, "p", long)
        reply = "".join(ev.text for ev in first if isinstance(ev, TextDelta))
        follow = long + [{"role": "assistant", "content": reply}, {"role": "user", "content": "And then?"}]
        return first, await events_of(engine, "p", follow)

    first, second = engine_with(body)
    stats = first[-1]
    assert isinstance(stats, TurnStats) and stats.finish_reason in ("stop", "length")
    kinds = [type(ev).__name__ for ev in first]
    progress = [ev for ev in first if isinstance(ev, PrefillProgress)]
    # Every progress event comes before the first piece of text.
    assert kinds.index("TextDelta") > max(i for i, k in enumerate(kinds) if k == "PrefillProgress")
    assert progress[0].done == 0 and progress[-1].done == progress[-1].total == stats.prefilled_tokens
    assert all(p.total == stats.prefilled_tokens for p in progress)
    assert [p.done for p in progress] == sorted({p.done for p in progress})
    assert all(p.prompt_tokens == stats.prompt_tokens and p.context_limit == stats.context_limit for p in progress)
    # The long first prompt is read in several chunks, each reported.
    assert stats.prefilled_tokens > 4 * generation.PREFILL_FIRST_STEP and len(progress) >= 3
    # A short follow-up is read in one chunk: one event once it is read (the prompt's size), then text.
    short = second[-1]
    assert 0 < short.prefilled_tokens <= generation.PREFILL_FIRST_STEP
    assert second[0] == PrefillProgress(
        short.prefilled_tokens, short.prefilled_tokens, short.prompt_tokens, short.context_limit
    )
    assert [type(ev).__name__ for ev in second[1:-1]] == ["TextDelta"] * (len(second) - 2)
    for events in (first, second):
        stats = events[-1]
        assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 12, tokenizer.eos_token_ids)


def test_progress_fraction():
    assert PrefillProgress(43, 100).fraction == 0.43
    assert PrefillProgress(0, 0).fraction == 1.0


def test_cli_replay_prints_one_line_per_turn_with_progress_in_the_stream(tiny_model_path, tmp_path, capsys):
    from app.cli.main import main

    script = tmp_path / "s.json"
    script.write_text(json.dumps({"system": "", "turns": ["word " * 200, "more"]}))
    assert main(["replay", str(script), "--model", str(tiny_model_path), "--max-tokens", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["turn"] for line in lines] == [0, 1]
    assert lines[1]["reused_tokens"] == len(lines[0]["prompt_ids"]) + len(lines[0]["reply_ids"])
