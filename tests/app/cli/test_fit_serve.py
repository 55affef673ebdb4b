"""`chinwag serve --kv-bits 8 --memory-limit 8GB` serves: the official `openai` client gets an answer
from a model loaded under the limit with an 8-bit KV cache (the refusals are in test_fit_flags.py)."""

import asyncio

import openai

from app.cli.main import main
from app.server import run
from tests.app.cli.test_fit_flags import wide_heads_path  # noqa: F401 (fixture)

SERVE_FOREVER = run.serve_forever  # the real one, whatever a test patches in


def served(monkeypatch, model, *flags) -> dict:
    """Run `chinwag serve` through main(); once it listens, ask it one question with the openai
    client, then stop it. What the client got and what the engine held."""
    seen: dict = {}
    tasks = []  # kept: the loop holds only a weak reference to a task

    async def serve_once(config, engine, ready=None, stop=None):
        stop = asyncio.Event()

        async def ask(server):
            try:
                client = openai.AsyncOpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)
                seen["reply"] = await client.chat.completions.create(
                    model=server.engine.current_model.id,
                    messages=[{"role": "user", "content": "hello there"}],
                    max_tokens=4,
                    temperature=0,
                )
                await client.close()
                state = server.engine.state
                seen["limit"], seen["kv_bytes"] = state.memory_limit_bytes, state.kv_bytes_total
            finally:
                stop.set()

        def listening(server):
            ready(server)
            tasks.append(asyncio.get_running_loop().create_task(ask(server)))

        await SERVE_FOREVER(config, engine, listening, stop)

    monkeypatch.setattr(run, "serve_forever", serve_once)
    assert main(["serve", "--port", "0", "--model", str(model), *flags]) == 0
    return seen


def test_serve_with_8_bit_kv_under_an_8GB_limit_answers_the_openai_client(
    wide_heads_path,  # noqa: F811
    monkeypatch,
    capsys,
):
    seen = served(monkeypatch, wide_heads_path, "--kv-bits", "8", "--memory-limit", "8GB")
    reply = seen["reply"]
    assert reply.choices[0].message.content and reply.usage.completion_tokens > 0
    assert seen["limit"] == 8 * 10**9  # the model was planned against the limit given
    assert "Serving" in capsys.readouterr().out
    full = served(monkeypatch, wide_heads_path, "--memory-limit", "8GB")
    # 8 bits and a scale and bias per 64 values, against float32 here: the flag reached the cache.
    assert 0 < seen["kv_bytes"] <= 0.35 * full["kv_bytes"], (seen["kv_bytes"], full["kv_bytes"])
