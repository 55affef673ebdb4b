"""engine/models/fit.py for a model not downloaded yet (the catalogue): estimated_plan sizes it from
its parameter count, bits and config figures, and agrees with plan() on a folder of the same sizes."""

import json
import struct

import pytest

from engine.cpu import DEQUANTIZE_ENV
from engine.models import fit
from engine.types import KVQuantization

ROWS, COLUMNS = 4096, 4096  # one 4-bit layer of 16.8 M weights
CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 2048,
    "quantization": {"group_size": 64, "bits": 4},
}


def quantized_folder(path):
    """A model folder whose safetensors file holds only a header (the rest sparse): MLX's 4-bit
    layout, packed uint32 weights and a bf16 scale and bias per 64."""
    tensors = {
        "model.layers.0.mlp.weight": ("U32", [ROWS, COLUMNS * 4 // 32], 4),
        "model.layers.0.mlp.scales": ("BF16", [ROWS, COLUMNS // 64], 2),
        "model.layers.0.mlp.biases": ("BF16", [ROWS, COLUMNS // 64], 2),
    }
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        n = shape[0] * shape[1] * size
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.mkdir()
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)
    (path / "config.json").write_text(json.dumps(CONFIG))
    return path


@pytest.mark.parametrize("dequantize", ["0", "1"])
def test_an_estimated_plan_is_the_folders_plan_for_the_same_sizes(tmp_path, monkeypatch, dequantize):
    monkeypatch.setenv(DEQUANTIZE_ENV, dequantize)
    folder = quantized_folder(tmp_path / "m")
    for kv in (None, KVQuantization(8, 64)):
        real = fit.plan(folder, 1 << 30, kv, name="M")
        estimate = fit.estimated_plan("M", ROWS * COLUMNS, 4, CONFIG, 1 << 30, kv)
        assert estimate == real
    # So the same limit gets the same verdict, word for word, on either side of what it needs.
    need = fit.plan(folder, 0, None, "M").needs(fit.MINIMAL_CHAT_TOKENS)  # in the leanest form a load may choose
    for limit in (need - 1, need):
        real = fit.plan(folder, limit, None, name="M")
        estimate = fit.estimated_plan("M", ROWS * COLUMNS, 4, CONFIG, limit, None)
        assert estimate == real and estimate.reason(None) == real.reason(None)  # in the same form too
    assert fit.plan(folder, need - 1, None, "M").reason(None).startswith("M does not fit in memory")


def test_quantized_weights_count_their_bits_and_a_scale_and_bias_per_group(monkeypatch):
    monkeypatch.setenv(DEQUANTIZE_ENV, "0")
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: True)
    assert fit.estimated_weight_bytes(8e9, 4) == int(8e9 * 4 / 8 + 8e9 / 64 * 2 * 4)  # float32 scales on the CPU
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: False)
    assert fit.estimated_weight_bytes(8e9, 4) == int(8e9 * 4.5 / 8)  # Metal: bf16 scales, 4.5 bits a weight


def test_bf16_weights_load_as_float32_on_the_cpu(monkeypatch):
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: True)
    assert fit.estimated_weight_bytes(1e9, 16) == 4 * 10**9
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: False)
    assert fit.estimated_weight_bytes(1e9, 16) == 2 * 10**9


def test_a_small_quantized_model_runs_dequantized_where_the_cpu_path_would(monkeypatch):
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: True)
    monkeypatch.setenv(DEQUANTIZE_ENV, "1")
    assert fit.estimated_weight_bytes(0.6e9, 4) == int(0.6e9 * 4)
    monkeypatch.setenv(DEQUANTIZE_ENV, "0")
    assert fit.estimated_weight_bytes(0.6e9, 4) < 0.6e9


def test_figures_name_how_many_layers_keep_every_token():
    figures = {"num_hidden_layers": 24, "full_attention_layers": 6, "num_key_value_heads": 2, "head_dim": 256}
    config = fit.figures_config(figures, "linear_attention")
    assert "full_attention_layers" not in config
    assert config["layer_types"].count("full_attention") == 6 and len(config["layer_types"]) == 24
    per_token, _ = fit.cache_bytes_per_token(config, None, float32=True)
    assert per_token == 6 * 2 * 2 * 256 * 4  # only the six attention layers grow with the chat
    windowed = fit.figures_config({**figures, "sliding_window": 512}, "sliding_attention")
    per_token, fixed = fit.cache_bytes_per_token(windowed, None, float32=True)
    assert per_token == 6 * 2 * 2 * 256 * 4 and fixed == 18 * (512 + 2 * fit.WINDOW_RESERVE) * 2 * 2 * 256 * 4
    plain = fit.figures_config({"num_hidden_layers": 28, "num_key_value_heads": 8, "head_dim": 128}, "x")
    assert "layer_types" not in plain and fit.cache_bytes_per_token(plain, None, False)[0] == 28 * 2 * 8 * 128 * 2


def test_a_reason_says_what_to_do_in_the_callers_words():
    plan = fit.Plan("Big", 5 * 10**9, 1000.0, 0, fit.RESERVE_BYTES, 4 * 10**9)
    assert plan.reason(None).endswith(
        "try a smaller model, a KV cache of 8 or 4 bits (--kv-bits), or a higher memory limit (--memory-limit)"
    )
    assert plan.reason(KVQuantization(8, 64), ("KV cache", "Memory limit")).endswith(
        "try a smaller model, a KV cache of fewer bits (KV cache), or a higher memory limit (Memory limit)"
    )
    assert "there is 4.0 GB" in plan.reason(None) and "weights 5.0 GB" in plan.reason(None)
    assert fit.Plan("Small", 10**6, 1000.0, 0, fit.RESERVE_BYTES, 4 * 10**9).reason(None) == ""


def test_the_default_limit_counts_back_the_weights_a_load_would_replace(monkeypatch):
    monkeypatch.setattr(fit, "available_bytes", lambda: 3 * 10**9)
    assert fit.default_limit() == 3 * 10**9 and fit.default_limit(2 * 10**9) == 5 * 10**9
    assert fit.estimated_plan("M", 1e9, 4, CONFIG, None, None).limit == 3 * 10**9


def test_a_model_that_fits_only_kept_quantized_is_estimated_so_as_a_load_would_keep_it(tmp_path, monkeypatch):
    monkeypatch.setenv(DEQUANTIZE_ENV, "1")  # dequantized as usual
    monkeypatch.setattr(fit, "_on_cpu_float32", lambda: True)
    folder = quantized_folder(tmp_path / "m")
    usual = fit.plan(folder, 1 << 40, None, "M")
    limit = usual.needs(fit.MINIMAL_CHAT_TOKENS) - 1
    estimate = fit.estimated_plan("M", ROWS * COLUMNS, 4, CONFIG, limit, None)
    assert estimate.leaner and not estimate.form.dequantized and estimate.reason(None) == ""
    assert estimate == fit.plan(folder, limit, None, "M")
