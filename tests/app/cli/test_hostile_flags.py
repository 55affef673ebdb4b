"""Hostile numbers and environment on the command line: one line, exit 2, nothing started."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main
from engine import ChinwagError, Engine, GenerationParams
from engine.types import MAX_KV_INITIAL_CAPACITY, MIN_TEMPERATURE

ROOT = Path(__file__).resolve().parents[3]


def refused(capsys, argv, *needles):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(n in err[0] for n in needles), err  # one line, no usage block
    return err[0]


@pytest.mark.parametrize("value", ["1e-45", "0.001", "nan", "-0.5", "inf"])
def test_a_temperature_that_samples_nan_is_refused(tmp_path, capsys, value):
    script = tmp_path / "chat.json"
    script.write_text('["hi"]')
    line = refused(capsys, ["replay", str(script), "--model", "x", "--temperature", value], "--temperature")
    assert "0 or a number from 0.01 to 2" in line


def test_generation_params_refuse_what_sampling_cannot_use():
    assert GenerationParams(temperature=0).temperature == 0
    assert GenerationParams(temperature=MIN_TEMPERATURE).temperature == MIN_TEMPERATURE
    for bad in (dict(temperature=1e-45), dict(top_p=float("nan")), dict(max_tokens=0), dict(seed=-1)):
        with pytest.raises(ChinwagError):
            GenerationParams(**bad)


@pytest.mark.parametrize("value", [str(MAX_KV_INITIAL_CAPACITY + 1), str(2**31 - 1), "0", "lots"])
def test_an_initial_kv_capacity_out_of_bounds_is_refused(tmp_path, capsys, value):
    script = tmp_path / "chat.json"
    script.write_text('["hi"]')
    refused(capsys, ["replay", str(script), "--model", "x", "--kv-initial-capacity", value], "--kv-initial-capacity")


def test_the_engine_refuses_an_initial_capacity_out_of_bounds():
    with pytest.raises(ChinwagError, match="initial KV capacity"):
        Engine(kv_initial_capacity=MAX_KV_INITIAL_CAPACITY + 1)
    Engine(kv_initial_capacity=MAX_KV_INITIAL_CAPACITY)  # cheap: the thread starts lazily


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "86400"])
def test_a_pause_that_would_never_end_is_refused(tmp_path, capsys, value):
    script = tmp_path / "chat.json"
    script.write_text('["hi"]')
    refused(capsys, ["replay", str(script), "--model", "x", "--pause", value], "--pause")


def test_chinwag_home_of_an_unknown_user_is_one_line(tmp_path):
    env = dict(os.environ, CHINWAG_HOME="~nosuchuser-chinwag/x")
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli.main", "conversations"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "chinwag: error: CHINWAG_HOME='~nosuchuser-chinwag/x': no such user's home folder"
    ]


@pytest.mark.parametrize(
    "argv, where",
    [
        (["frob"], "chinwag --help"),
        (["servers"], "chinwag servers --help"),
        (["mcp"], "chinwag mcp --help"),
        (["chat", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["export", "1", "--format", "docx"], "chinwag export --help"),
    ],
)
def test_a_bad_command_line_is_one_line_that_says_where_the_usage_is(capsys, argv, where):
    line = refused(capsys, argv, where)
    assert line.startswith("chinwag") and ": error: " in line
