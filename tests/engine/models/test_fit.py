"""engine/models/fit.py: sizes, bytes per token and the refusal, from config.json alone."""

import json
import sys

import pytest

from engine.errors import ChinwagError
from engine.models import fit
from engine.types import KVQuantization
from tests.tiny_model import CONFIG, build_tiny_model

LLAMA = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576}


@pytest.mark.parametrize(
    ("text", "expected"),
    [("6GB", 6 * 10**9), ("6144MB", 6144 * 10**6), ("6GiB", 6 << 30), ("512", 512), ("1.5 GB", 1.5e9)],
)
def test_sizes_are_read_in_decimal_and_binary_units(text, expected):
    assert fit.parse_memory_limit(text, "--memory-limit") == expected


def test_a_share_is_of_this_machines_ram():
    assert fit.parse_memory_limit("50%", "--memory-limit") == fit.ram_bytes() // 2


@pytest.mark.parametrize("text", ["banana", "-1GB", "0", "0MB", "0%", "101%", "6 XB", ""])
def test_a_bad_size_is_refused_naming_where_it_came_from(text):
    with pytest.raises(ChinwagError, match="CHINWAG_MEMORY_LIMIT"):
        fit.parse_memory_limit(text, "CHINWAG_MEMORY_LIMIT")


def test_a_plain_attention_token_takes_keys_and_values_of_every_layer():
    per_token, fixed = fit.cache_bytes_per_token(LLAMA, None, float32=True)
    assert (per_token, fixed) == (2 * 3 * 64 * 30 * 4, 0)


def test_a_quantized_token_takes_its_bits_plus_a_scale_and_bias_per_group():
    per_token, _ = fit.cache_bytes_per_token(LLAMA, KVQuantization(4, 64), float32=False)
    assert per_token == 2 * 3 * 64 * 30 * (4 / 8 + 2 * 2 / 64)


def test_sliding_window_layers_are_a_fixed_size_at_their_window():
    config = {**LLAMA, "sliding_window": 512, "layer_types": ["sliding_attention"] * 25 + ["full_attention"] * 5}
    per_token, fixed = fit.cache_bytes_per_token(config, None, float32=True)
    assert (per_token, fixed) == (2 * 3 * 64 * 5 * 4, 25 * (512 + 128) * 2 * 3 * 64 * 4)


def test_latent_attention_takes_its_latent_and_rope_key():
    config = {**LLAMA, "kv_lora_rank": 512, "qk_rope_head_dim": 64}
    assert fit.cache_bytes_per_token(config, None, float32=False)[0] == 30 * (512 + 64) * 2


def test_the_weights_are_sized_from_the_headers_alone(tmp_path):
    folder = build_tiny_model(tmp_path / "m")
    sizes = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    assert 0 < fit.plan(folder, 1 << 30).weights <= 2 * sizes  # float32 here at most doubles float16


def test_a_model_that_holds_a_short_chat_passes_the_check(tmp_path):
    fit.plan(build_tiny_model(tmp_path / "m"), 1 << 30).check(None)


def test_a_model_that_cannot_hold_a_short_chat_is_refused_in_one_line_naming_it(tmp_path):
    plan = fit.plan(build_tiny_model(tmp_path / "m"), 10**6, name="Tiny")
    with pytest.raises(ChinwagError, match=r"^Tiny does not fit in memory: it needs .* there is 1\.0 MB; try") as e:
        plan.check(None)
    assert "\n" not in str(e.value)


def test_the_longest_context_is_what_the_room_left_holds(tmp_path):
    plan = fit.plan(build_tiny_model(tmp_path / "m", config=dict(CONFIG)), 1 << 30)
    assert plan.longest_context == int((plan.limit - plan.weights - plan.reserve - plan.fixed) // plan.per_token)


def test_sizing_a_model_imports_no_mlx(tmp_path):
    import subprocess

    folder = build_tiny_model(tmp_path / "m")
    code = (
        f"import sys; from engine.models import fit; fit.plan({str(folder)!r}, None); print('mlx.core' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_folder_without_a_readable_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps([1]))
    with pytest.raises(ChinwagError, match="not a JSON object"):
        fit.plan(tmp_path, None)
