"""`--kv-bits`, `--kv-group-size` and `--memory-limit` on chat, replay and serve, through the CLI's main()."""

import json

import pytest

from app.cli.main import main
from tests.tiny_model import CONFIG, build_tiny_model


@pytest.fixture(scope="module")
def wide_heads_path(tmp_path_factory):
    """The tiny llama with head dim 64, which every KV group size divides."""
    return build_tiny_model(tmp_path_factory.mktemp("wide-heads"), config=dict(CONFIG, head_dim=64))


def _script(tmp_path):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"system": "", "turns": ["hello there", "more"]}))
    return script


def _error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_replay_with_4_bit_kv_runs_on_a_model_whose_head_dim_fits(wide_heads_path, tmp_path, capsys):
    code = main(
        ["replay", str(_script(tmp_path)), "--model", str(wide_heads_path), "--max-tokens", "3", "--kv-bits", "4"]
    )
    assert code == 0
    assert [json.loads(line)["turn"] for line in capsys.readouterr().out.splitlines()] == [0, 1]


def test_replay_with_8_bit_kv_and_groups_of_32_runs(wide_heads_path, tmp_path, capsys):
    argv = ["replay", str(_script(tmp_path)), "--model", str(wide_heads_path), "--max-tokens", "2"]
    assert main([*argv, "--kv-bits", "8", "--kv-group-size", "32"]) == 0


@pytest.mark.parametrize("command", ["chat", "replay", "serve"])
def test_seven_kv_bits_is_one_line_and_exit_2(command, tmp_path, capsys):
    extra = [str(_script(tmp_path)), "--model", "x"] if command == "replay" else []
    assert main([command, *extra, "--kv-bits", "7"]) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "--kv-bits" in lines[0] and "7" in lines[0]


def test_a_group_size_no_head_divides_is_refused_in_one_line(wide_heads_path, tmp_path, capsys):
    argv = [
        "replay",
        str(_script(tmp_path)),
        "--model",
        str(wide_heads_path),
        "--kv-bits",
        "4",
        "--kv-group-size",
        "48",
    ]
    assert main(argv) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "--kv-group-size" in lines[0]


def test_kv_bits_on_the_tiny_models_head_dim_16_is_refused_in_one_line(tiny_model_path, tmp_path, capsys):
    argv = ["replay", str(_script(tmp_path)), "--model", str(tiny_model_path), "--kv-bits", "4"]
    assert main(argv) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "error" in lines[0]


def test_a_group_size_without_kv_bits_is_refused(tmp_path, capsys):
    assert main(["replay", str(_script(tmp_path)), "--model", "x", "--kv-group-size", "32"]) == 2
    assert "--kv-bits" in _error_lines(capsys)[0]


@pytest.mark.parametrize("value", ["banana", "-1GB", "0", "0%", "150%"])
@pytest.mark.parametrize("command", ["chat", "replay", "serve"])
def test_a_bad_memory_limit_is_one_line_and_exit_2(command, value, tmp_path, capsys):
    extra = [str(_script(tmp_path)), "--model", "x"] if command == "replay" else []
    assert main([command, *extra, f"--memory-limit={value}"]) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "--memory-limit" in lines[0] and value in lines[0]


@pytest.mark.parametrize("value", ["banana", "-1GB", "0"])
@pytest.mark.parametrize("command", ["chat", "replay", "serve"])
def test_a_bad_memory_limit_in_the_environment_names_the_variable(command, value, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CHINWAG_MEMORY_LIMIT", value)
    extra = [str(_script(tmp_path)), "--model", "x"] if command == "replay" else []
    assert main([command, *extra]) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "CHINWAG_MEMORY_LIMIT" in lines[0] and repr(value) in lines[0]


def test_a_model_that_does_not_fit_the_limit_is_refused_naming_it(tiny_model_path, tmp_path, capsys):
    argv = ["replay", str(_script(tmp_path)), "--model", str(tiny_model_path), "--memory-limit", "1MB"]
    assert main(argv) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "does not fit" in lines[0] and "--kv-bits" in lines[0] and "--memory-limit" in lines[0]


def test_the_tiny_model_runs_under_a_1GB_limit(tiny_model_path, tmp_path, capsys):
    argv = ["replay", str(_script(tmp_path)), "--model", str(tiny_model_path), "--max-tokens", "2"]
    assert main([*argv, "--memory-limit", "1GB"]) == 0


def _listed_fit(chinwag_home, capsys, *flags):
    build_tiny_model(chinwag_home / "models" / "tiny", config=dict(CONFIG, head_dim=64))
    assert main(["models", "--json", *flags]) == 0
    return next(m["fit"] for m in json.loads(capsys.readouterr().out) if m["path"].endswith("tiny"))


def test_models_json_gives_a_local_models_weights_and_cache_per_token(chinwag_home, capsys):
    listed = _listed_fit(chinwag_home, capsys)
    assert listed["weight_bytes"] > 0 and listed["cache_bytes_per_token"] == 2 * 2 * 64 * 2 * 4


def test_models_json_gives_the_longest_context_under_the_memory_limit(chinwag_home, capsys):
    listed = _listed_fit(chinwag_home, capsys, "--memory-limit", "270MB")
    room = 270 * 10**6 - listed["weight_bytes"] - listed["reserve_bytes"] - listed["fixed_cache_bytes"]
    assert 0 < listed["longest_context"] == int(room // listed["cache_bytes_per_token"]) < 2048


def test_models_json_sizes_a_quantized_cache_smaller(chinwag_home, capsys):
    full = _listed_fit(chinwag_home, capsys)["cache_bytes_per_token"]
    assert main(["models", "--json", "--kv-bits", "4"]) == 0
    quantized = next(m["fit"] for m in json.loads(capsys.readouterr().out) if m["path"].endswith("tiny"))
    assert quantized["cache_bytes_per_token"] < full / 4


def test_serve_refuses_a_model_over_the_limit_in_one_line_before_serving(tiny_model_path, capsys):
    assert main(["serve", "--port", "0", "--model", str(tiny_model_path), "--memory-limit", "1MB"]) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "does not fit" in lines[0]


def test_models_says_which_model_a_load_would_refuse_and_why(chinwag_home, capsys):
    """`chinwag models` gives Plan.check's line for a model over the limit (as the Model menu greys it)."""
    build_tiny_model(chinwag_home / "models" / "tiny", config=dict(CONFIG, head_dim=64))
    assert main(["models", "--memory-limit", "1MB"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny"))
    assert "tiny does not fit in memory:" in line and "there is 1.0 MB; try a smaller model" in line
    assert main(["models", "--memory-limit", "1GB"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny"))
    assert "does not fit" not in line
    assert main(["models", "--json", "--memory-limit", "1MB"]) == 0
    listed = next(m["fit"] for m in json.loads(capsys.readouterr().out) if m["path"].endswith("tiny"))
    assert listed["reason"].startswith("tiny does not fit in memory") and listed["memory_limit_bytes"] == 10**6
    assert main(["models", "--json", "--memory-limit", "1GB"]) == 0
    assert next(m["fit"] for m in json.loads(capsys.readouterr().out) if m["path"].endswith("tiny"))["reason"] == ""


def test_models_with_a_bad_limit_is_one_line_and_exit_2(capsys):
    assert main(["models", "--memory-limit", "banana"]) == 2
    lines = _error_lines(capsys)
    assert len(lines) == 1 and "--memory-limit" in lines[0]
