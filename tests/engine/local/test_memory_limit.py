"""Engine(memory_limit_bytes=...): the check before the weights are read, and the caches' budget."""

import pytest

from engine.errors import ChinwagError
from engine.models import fit

LIMIT = 1 << 30


def test_with_a_limit_the_caches_get_what_the_weights_and_reserve_leave(engine_with, tiny_model_path):
    async def body(engine):
        return (await engine.memory_stats()).budget_bytes

    plan = fit.plan(tiny_model_path, LIMIT)
    assert engine_with(body, memory_limit_bytes=LIMIT) == LIMIT - plan.weights - plan.reserve


def test_an_explicit_cache_budget_wins_over_the_limit(engine_with):
    async def body(engine):
        return (await engine.memory_stats()).budget_bytes

    assert engine_with(body, memory_limit_bytes=LIMIT, memory_budget_bytes=5 << 20) == 5 << 20


def test_a_model_over_the_limit_is_refused_at_load(engine_with):
    async def body(engine):
        return engine.current_model

    with pytest.raises(ChinwagError, match="does not fit in memory"):
        engine_with(body, memory_limit_bytes=10**6)
