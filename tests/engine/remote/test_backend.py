"""engine/remote/backend.py behind Engine: a server's model answers the whole backend interface."""

import asyncio

import pytest

from engine import Engine, GenerationParams, TextDelta
from engine.paths import kv_file_name
from engine.remote.backend import RemoteBackend
from tests.remote_standin import StandIn


@pytest.fixture
def standin():
    with StandIn() as s:
        yield s


def test_a_servers_model_reads_no_draft_and_forget_drops_its_replies_and_local_caches(standin, chinwag_home):
    saved = chinwag_home / "kv" / "some-model" / kv_file_name("c")
    saved.parent.mkdir(parents=True)
    saved.write_bytes(b"saved by an earlier run")
    messages = [{"role": "user", "content": "hi"}]

    async def main():
        engine = Engine()
        try:
            await engine.load_model(f"{standin.url}#reasoning")
            backend = engine._backend
            assert isinstance(backend, RemoteBackend)
            ahead = await engine.prefill("c", messages, GenerationParams())
            adopted = await engine.adopt("draft", "c")
            reply = "".join([e.text async for e in engine.chat("c", messages) if isinstance(e, TextDelta)])
            remembered = dict(backend._replies)
            await engine.forget("c")
            return ahead, adopted, reply, remembered, dict(backend._replies)
        finally:
            await engine.close()

    ahead, adopted, reply, remembered, after = asyncio.run(main())
    assert not ahead.finished and ahead.reason == "the model is served elsewhere" and adopted is False
    assert remembered == {"c": {reply: "The answer is 4."}} and after == {}
    assert not saved.exists()  # the local caches of a deleted chat go too, whichever backend is current
