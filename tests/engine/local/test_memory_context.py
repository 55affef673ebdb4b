"""A chat's context is capped at what the memory budget holds (issue 32 item 3), and said so where
the context length is shown: ModelInfo.memory_context, every context limit the engine gives, and
`chinwag chat`/`replay`'s line."""

import json

import pytest

from app.cli.main import main
from engine import GenerationParams
from engine.models import fit
from tests.conftest import run_with_engine
from tests.tiny_model import build_tiny_model

HELD = 3000  # tokens the budget below holds, of the model's 32,768


@pytest.fixture(scope="module")
def long_tiny(tmp_path_factory):
    """The tiny llama with a 32K context, far more than a small memory limit holds."""
    return build_tiny_model(tmp_path_factory.mktemp("long-tiny"), context_length=32768)


def limit_holding(path, tokens: int) -> int:
    plan = fit.plan(path, 1 << 30)
    return int(plan.weights + plan.reserve + plan.fixed + plan.per_token * tokens)


async def limits(engine):
    """(the loaded model's memory_context, count_tokens' limit, a turn's TurnStats.context_limit)."""
    counted = await engine.count_tokens("hello")
    params = GenerationParams(temperature=0.0, max_tokens=2)
    stats = [ev async for ev in engine.chat("c", [{"role": "user", "content": "hi"}], params)][-1]
    return engine.current_model.memory_context, counted.context_limit, stats.context_limit


def test_the_context_is_capped_at_what_the_budget_holds(long_tiny):
    assert run_with_engine(long_tiny, limits, memory_limit_bytes=limit_holding(long_tiny, HELD)) == (HELD,) * 3


def test_a_limit_that_holds_the_whole_context_caps_nothing(long_tiny):
    assert run_with_engine(long_tiny, limits, memory_limit_bytes=1 << 40) == (0, 32768, 32768)


def test_an_explicit_cache_budget_caps_nothing(long_tiny):
    assert run_with_engine(long_tiny, limits, memory_budget_bytes=1 << 20) == (0, 32768, 32768)


def test_replay_says_the_context_is_capped_by_memory(long_tiny, tmp_path, capsys):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"system": "", "turns": ["hello there"]}))
    limit = str(limit_holding(long_tiny, HELD))
    assert main(["replay", str(script), "--model", str(long_tiny), "--max-tokens", "2", "--memory-limit", limit]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out.splitlines()[0])["context_limit"] == HELD
    assert "context 3,000 of 32,768 tokens: memory" in out.err


def test_the_engines_kv_figure_follows_a_reply_as_it_grows(engine_with):
    """Issue 35: the state's KV bytes grow while the reply is written, not only after the turn."""
    from engine import TextDelta

    async def body(engine):
        seen, params = [], GenerationParams(temperature=0.0, max_tokens=40)
        async for ev in engine.chat("c", [{"role": "user", "content": "hi"}], params):
            if isinstance(ev, TextDelta):
                seen.append(engine.state.kv_bytes_total)
        return seen, engine.state.kv_bytes_total

    seen, after = engine_with(body, kv_initial_capacity=16)  # the cache's buffer grows during the reply
    assert len(set(seen)) > 1 and seen == sorted(seen) and seen[-1] == after
