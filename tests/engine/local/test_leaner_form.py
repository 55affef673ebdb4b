"""A model whose float32 cast would not fit the memory limit, but whose weights as stored do, is
loaded as stored (issue 32 item 2): said in the log, and its replies are mlx-lm's on the same weights."""

import asyncio
import logging

import mlx.core as mx
import pytest
from mlx.utils import tree_flatten

from engine import Engine, GenerationParams
from engine.errors import ChinwagError
from engine.models import fit
from tests.engine.test_api import reference, turn
from tests.tiny_model import build_tiny_model

GREEDY = GenerationParams(temperature=0.0, max_tokens=8)


@pytest.fixture(scope="module")
def bf16_path(tmp_path_factory):
    """The tiny model with its weights stored in bfloat16, as most models on the Hub are."""
    path = build_tiny_model(tmp_path_factory.mktemp("bf16"))
    weights = mx.load(str(path / "model.safetensors"))
    mx.save_safetensors(str(path / "model.safetensors"), {k: v.astype(mx.bfloat16) for k, v in weights.items()})
    return path


def _between(path) -> int:
    """A limit the weights fit as stored, and not cast to float32."""
    stored = fit.plan(path, 1 << 40)  # the usual form: float32 on this CPU
    assert stored.form.float32 and not stored.leaner
    half = stored.needs(fit.MINIMAL_CHAT_TOKENS) - stored.weights // 2 - stored.per_token * fit.MINIMAL_CHAT_TOKENS / 2
    return int(half) + 1


def test_with_room_the_weights_are_cast_to_float32_as_usual(bf16_path):
    plan = fit.plan(bf16_path, 1 << 40)
    assert plan.form == fit.Form(float32=True, dequantized=False) and not plan.leaner


def test_where_float32_would_not_fit_the_plan_keeps_the_weights_as_stored(bf16_path):
    usual = fit.plan(bf16_path, 1 << 40)
    plan = fit.plan(bf16_path, _between(bf16_path))
    assert plan.leaner and plan.form == fit.Form(float32=False, dequantized=False)
    assert plan.weights * 2 == usual.weights and plan.per_token * 2 == usual.per_token
    plan.check(None)  # it fits as stored


def test_where_nothing_fits_the_refusal_says_what_the_stored_weights_need(bf16_path):
    plan = fit.plan(bf16_path, 1 << 20)
    with pytest.raises(ChinwagError, match=r"weights .* as stored, not cast to float32 and a 2048-token chat"):
        plan.check(None)


def test_the_engine_loads_it_as_stored_says_so_and_replies_as_mlx_lm_does(bf16_path, caplog):
    import mlx_lm

    caplog.set_level(logging.WARNING, logger="engine.local.session")

    async def main():
        engine = Engine(memory_limit_bytes=_between(bf16_path))
        try:
            await engine.load_model(str(bf16_path))
            model = engine._local.session.model
            dtypes = {v.dtype for _, v in tree_flatten(model.parameters())}
            messages, out = [{"role": "user", "content": "Hello there"}], []
            for i in range(2):
                text, stats = await turn(engine, "c", messages, GREEDY)
                out.append(stats)
                messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"And {i}?"}]
            return dtypes, out
        finally:
            await engine.close()

    dtypes, out = asyncio.run(main())
    assert dtypes == {mx.bfloat16}
    assert any("as stored, not cast to float32" in r.getMessage() for r in caplog.records)
    model, tokenizer = mlx_lm.load(str(bf16_path))  # mlx-lm keeps the stored dtype
    for stats in out:
        assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 8, tokenizer.eos_token_ids)
    assert out[1].reused_tokens >= len(out[0].prompt_ids)  # the follow-up reads only its new tokens


@pytest.fixture(scope="module")
def quantized_path(tmp_path_factory):
    """The tiny model quantized to 8 bits (groups of 32), as mlx-lm saves a quantized model."""
    import json

    import mlx.nn as nn
    from mlx_lm.utils import load_model

    path = build_tiny_model(tmp_path_factory.mktemp("q8"))
    model, _ = load_model(path)
    nn.quantize(model, group_size=32, bits=8)
    mx.save_safetensors(str(path / "model.safetensors"), dict(tree_flatten(model.parameters())))
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**config, "quantization": {"group_size": 32, "bits": 8}}))
    return path


def test_a_quantized_model_that_would_not_fit_dequantized_is_kept_quantized(quantized_path, monkeypatch):
    import mlx_lm

    monkeypatch.setenv("CHINWAG_CPU_DEQUANTIZE", "1")  # dequantized as usual, whatever BLAS this machine has
    usual = fit.plan(quantized_path, 1 << 40)
    assert usual.form.dequantized and not usual.leaner
    kept = fit.plan(quantized_path, usual.needs(fit.MINIMAL_CHAT_TOKENS) - 1)
    assert kept.leaner and kept.form == fit.Form(float32=True, dequantized=False) and kept.weights < usual.weights

    async def main():
        engine = Engine(memory_limit_bytes=usual.needs(fit.MINIMAL_CHAT_TOKENS) - 1)
        try:
            await engine.load_model(str(quantized_path))
            model = engine._local.session.model
            quantized = any(hasattr(m, "bits") for _, m in model.named_modules())
            _, stats = await turn(engine, "c", [{"role": "user", "content": "Hello there"}], GREEDY)
            return quantized, stats
        finally:
            await engine.close()

    quantized, stats = asyncio.run(main())
    assert quantized
    model, tokenizer = mlx_lm.load(str(quantized_path))
    assert list(stats.reply_ids) == reference(model, list(stats.prompt_ids), 8, tokenizer.eos_token_ids)


def test_the_engine_refuses_with_the_typed_error_front_ends_word_in_their_own_settings(bf16_path):
    from engine import DoesNotFitError

    async def main():
        engine = Engine(memory_limit_bytes=1 << 20)
        try:
            await engine.load_model(str(bf16_path))
        finally:
            await engine.close()

    with pytest.raises(DoesNotFitError) as refused:
        asyncio.run(main())
    assert str(refused.value).endswith(
        "a KV cache of 8 or 4 bits (--kv-bits), or a higher memory limit (--memory-limit)"
    )
    assert "(Memory limit)" in refused.value.advice("KV cache", "Memory limit")
