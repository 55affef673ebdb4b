"""Engine.configure: the window's memory limit and KV setting for the next load; a load they refuse
keeps the loaded model and its own options."""

import pytest

from engine.errors import ChinwagError
from engine.models import fit
from engine.types import KVQuantization

GB = 1 << 30


def test_the_next_load_uses_the_configured_limit(engine_with, tiny_model_path):
    async def body(engine):
        await engine.configure(None, GB)
        await engine.load_model(str(tiny_model_path))
        return (await engine.memory_stats()).budget_bytes, engine.state.memory_limit_bytes

    plan = fit.plan(tiny_model_path, GB)
    assert engine_with(body) == (GB - plan.weights - plan.reserve, GB)


def test_a_refused_load_keeps_the_model_and_its_options(engine_with, tiny_model_path):
    async def body(engine):
        before = (await engine.memory_stats()).budget_bytes
        await engine.configure(None, 10**6)
        with pytest.raises(ChinwagError, match="does not fit in memory"):
            await engine.load_model(str(tiny_model_path))
        return before, (await engine.memory_stats()).budget_bytes, engine.current_model, engine.state.memory_limit_bytes

    before, after, model, limit = engine_with(body, memory_limit_bytes=GB)
    assert after == before and model is not None and limit == GB


def test_a_kv_setting_the_model_cannot_keep_is_refused_in_one_line(engine_with, tiny_model_path):
    async def body(engine):
        await engine.configure(KVQuantization(4), None)
        with pytest.raises(ChinwagError) as refused:
            await engine.load_model(str(tiny_model_path))  # head dim 16: no group size divides it
        return str(refused.value), engine.current_model

    line, model = engine_with(body)
    assert "\n" not in line and model is not None
