"""Issue 35 item 7: mlx-lm's import calls setrlimit(RLIMIT_NOFILE, (2048, 4096)), which raises under a hard limit
below 4,096 (`ulimit -n 1024`, services with LimitNOFILE=1024): every model load died as "a bug in Chinwag".
Loading works under such a limit, and mlx-lm never lowers a higher one."""

import json
import subprocess
import sys
from pathlib import Path

_CHILD = """
import asyncio, json, resource, sys
soft, hard = int(sys.argv[2]), int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
from engine import Engine, TextDelta
from engine.types import GenerationParams

async def main():
    engine = Engine()
    try:
        info = await engine.load_model(sys.argv[1])
        params = GenerationParams(max_tokens=3, temperature=0.0)
        events = [e async for e in engine.chat("c", [{"role": "user", "content": "hi"}], params)]
        return info.id, sum(isinstance(e, TextDelta) for e in events)
    finally:
        await engine.close()

model, tokens = asyncio.run(main())
print(json.dumps({"model": model, "tokens": tokens, "limit": resource.getrlimit(resource.RLIMIT_NOFILE)}))
"""


def _load_under(model: Path, soft: int, hard: int) -> dict:
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(model), str(soft), str(hard)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_model_loads_under_a_hard_descriptor_limit_of_1024(tiny_model_path):
    result = _load_under(tiny_model_path, 256, 1024)
    assert result["tokens"] > 0  # it loaded and replied
    assert result["limit"] == [1024, 1024]  # the soft limit raised as far as the hard one lets mlx-lm


def test_a_higher_descriptor_limit_is_not_lowered(tiny_model_path):
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 8192:
        import pytest

        pytest.skip(f"needs a hard descriptor limit of 8,192 or more (it is {hard:,})")
    result = _load_under(tiny_model_path, 8192, 8192)
    assert result["limit"] == [8192, 8192]  # mlx-lm alone would set (2048, 4096)
