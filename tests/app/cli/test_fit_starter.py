"""The memory limit on the real starter model: refused before a byte of weights is read, or run."""

import json
import os
import subprocess
import sys

import pytest

from engine.models import fit, registry
from engine.models.folders import STARTER_ID

pytestmark = pytest.mark.starter

# Runs `chinwag` in its own process and writes that process's peak resident memory in KiB: Linux's
# VmHWM, as getrusage's ru_maxrss starts from the parent's (pytest's, with MLX loaded) at the fork.
# It leaves by os._exit, as `chinwag` does once MLX has run (app/cli/main.py `_exit`).
CHILD = """
import os, resource, sys
from app.cli.main import main
code = main(sys.argv[2:]) if sys.argv[2:] else 0
if not sys.argv[2:]:  # the baseline: the modules a load imports, and nothing read
    import mlx.core, mlx_lm, mlx_lm.utils
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if os.path.exists("/proc/self/status"):
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
with open(sys.argv[1], "w") as f:
    f.write(str(peak))
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
"""


@pytest.fixture(scope="module")
def starter_home(tmp_path_factory):
    """A data folder with the starter imported once (importing reads the GGUF's weights)."""
    home = tmp_path_factory.mktemp("starter-home")
    old = os.environ.get("CHINWAG_HOME")
    os.environ["CHINWAG_HOME"] = str(home)
    try:
        path, _ = registry.resolve_model(STARTER_ID)
    finally:
        if old is None:
            del os.environ["CHINWAG_HOME"]
        else:
            os.environ["CHINWAG_HOME"] = old
    baseline = tmp_path_factory.mktemp("baseline") / "rss"
    subprocess.run([sys.executable, "-c", CHILD, str(baseline)], check=True, timeout=600)
    return home, fit.plan(path, None).weights, int(baseline.read_text()) * 1024


def _replay(home, tmp_path, *flags, env=None):
    script = tmp_path / "s.json"
    script.write_text(json.dumps({"system": "", "turns": ["Hi"]}))
    rss = tmp_path / "rss"
    argv = [sys.executable, "-c", CHILD, str(rss), "replay", str(script), "--model", STARTER_ID, "--max-tokens", "2"]
    environment = {k: v for k, v in os.environ.items() if k != "CHINWAG_MEMORY_LIMIT"}
    environment.update(CHINWAG_HOME=str(home), **(env or {}))
    done = subprocess.run([*argv, *flags], env=environment, capture_output=True, text=True, timeout=600)
    return done, int(rss.read_text()) * 1024


def _assert_refused_without_reading_weights(done, peak, weights, baseline):
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2
    assert len(lines) == 1 and "does not fit" in lines[0] and "SmolLM2" in lines[0]
    # The weights take 115 MB here (651 MB dequantized on OpenBLAS); the refusal peaks at what
    # importing MLX and mlx-lm takes (about 10 MB more, for the tokenizer's modules and the thread).
    assert peak < baseline + weights / 4, (peak, baseline)


def test_a_60MB_limit_in_the_environment_refuses_the_starter_before_reading_weights(starter_home, tmp_path):
    home, weights, baseline = starter_home
    done, peak = _replay(home, tmp_path, env={"CHINWAG_MEMORY_LIMIT": "60MB"})
    _assert_refused_without_reading_weights(done, peak, weights, baseline)


def test_a_60MB_memory_limit_flag_refuses_the_starter_before_reading_weights(starter_home, tmp_path):
    home, weights, baseline = starter_home
    done, peak = _replay(home, tmp_path, "--memory-limit", "60MB")
    _assert_refused_without_reading_weights(done, peak, weights, baseline)


def test_an_8GB_limit_runs_the_starter(starter_home, tmp_path):
    home, _, _ = starter_home
    done, _ = _replay(home, tmp_path, env={"CHINWAG_MEMORY_LIMIT": "8GB"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["turn"] == 0


def test_the_peak_measured_holds_the_weights_when_the_starter_runs(starter_home, tmp_path):
    """The measure the refusals are held to sees weights read: a run's peak holds most of them."""
    home, weights, baseline = starter_home
    _, peak = _replay(home, tmp_path, "--memory-limit", "8GB")
    assert peak > baseline + weights / 2, (peak, baseline)


QUESTIONS = [
    "What is the capital of France?",
    "Name three fruits.",
    "What is 2+2?",
    "Who wrote Hamlet?",
    "What colour is the sky?",
    "Name a large animal.",
    "What is water made of?",
    "How many days are in a week?",
    "What is the opposite of hot?",
    "Name a planet.",
    "What do bees make?",
    "Say goodbye.",
]


def test_a_12_turn_replay_with_quantized_kv_reuses_its_history_in_a_fraction_of_the_bytes(starter_home, tmp_path):
    """Issue 32's Done-when, on `chinwag replay` itself: every follow-up reuses the whole history;
    the last turn's kv_bytes at most 0.35 (8 bits) and 0.2 (4 bits) of the full-precision run's; most
    8-bit replies equal the full-precision ones."""
    home, _, _ = starter_home
    script = tmp_path / "twelve.json"
    script.write_text(json.dumps({"system": "Be brief.", "turns": QUESTIONS}))
    runs = {}
    for bits in (None, 8, 4):
        flags = ["--kv-bits", str(bits)] if bits else []
        argv = ["replay", str(script), "--model", STARTER_ID, "--max-tokens", "8", *flags]
        env = {k: v for k, v in os.environ.items() if k != "CHINWAG_MEMORY_LIMIT"}
        done = subprocess.run(
            [sys.executable, "-m", "app.cli.main", *argv],
            env={**env, "CHINWAG_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr
        runs[bits] = [json.loads(line) for line in done.stdout.splitlines()]
    for turns in runs.values():
        assert len(turns) == 12
        for prev, turn in zip(turns, turns[1:]):
            assert turn["reused_tokens"] == len(prev["prompt_ids"]) + len(prev["reply_ids"])
    full = runs[None][-1]["kv_bytes"]
    assert runs[8][-1]["kv_bytes"] <= 0.35 * full and runs[4][-1]["kv_bytes"] <= 0.2 * full
    assert sum(a["reply_ids"] == b["reply_ids"] for a, b in zip(runs[8], runs[None])) > 6
