"""Engine.list_models gives each local model's fit_reason under the engine's memory limit and KV
setting (what the window greys out), from the folder's headers: no weight is read."""

import asyncio

from engine import Engine


def listed(tiny_model_path, **options) -> str:
    async def main():
        engine = Engine(**options)
        try:
            await engine.add_model_folder(str(tiny_model_path))
            models = await engine.list_models()
            return next(m.fit_reason for m in models if m.path == str(tiny_model_path))
        finally:
            await engine.close()

    return asyncio.run(main())


def test_a_model_over_the_limit_says_why(tiny_model_path):
    reason = listed(tiny_model_path, memory_limit_bytes=10**6)
    assert "does not fit in memory" in reason and "1.0 MB" in reason


def test_a_model_under_the_limit_has_no_reason(tiny_model_path):
    assert listed(tiny_model_path, memory_limit_bytes=1 << 30) == ""
