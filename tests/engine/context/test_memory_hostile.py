"""A saved cache is untrusted input: a damaged, edited or odd file in kv/ is never used and never
crashes. The chat is read again, its next reply is what a fresh computation gives (greedy), and
the bad file is not saved again; symlinks and named pipes block nothing and break no close."""

import asyncio
import logging
import os
import threading

import mlx.core as mx
import pytest

from engine import GenerationParams
from engine.context import cache_file
from tests.conftest import run_with_engine
from tests.engine.test_api import turn

GREEDY = GenerationParams(temperature=0.0, max_tokens=8)
FIRST = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story about a cat"}]
CONV = "chat"
_references: dict = {}


def follow(text: str) -> list:
    return FIRST + [{"role": "assistant", "content": text}, {"role": "user", "content": "And then?"}]


def first_chat(model_path) -> str:
    async def body(engine):
        return (await turn(engine, CONV, FIRST, GREEDY))[0]

    return run_with_engine(model_path, body)


def follow_up(model_path, text: str):
    """The follow-up turn in a fresh engine: (reply, stats, memory report)."""

    async def body(engine):
        reply, stats = await turn(engine, CONV, follow(text), GREEDY)
        return reply, stats, await engine.memory_stats()

    return run_with_engine(model_path, body)


def reference(model_path, kv) -> tuple:
    """(first reply, follow-up with the intact saved cache, follow-up with nothing saved): a sound
    cache gives the second (the reply's ids as generated); a dropped one must give the third (the
    reply's text read again). They may differ: re-encoding generated text need not give its ids."""
    key = str(model_path)
    if key not in _references:
        text = first_chat(model_path)
        intact, stats, _ = follow_up(model_path, text)
        assert stats.reused_tokens > 0
        for f in kv.rglob("*.safetensors"):
            f.unlink()
        again, stats, _ = follow_up(model_path, text)
        assert stats.reused_tokens == 0
        for f in kv.rglob("*.safetensors"):
            f.unlink()
        _references[key] = (text, intact, again)
    return _references[key]


@pytest.fixture
def saved(tiny_model_path, chinwag_home):
    """After a first chat and a restart: (its reply, the follow-up a fresh computation gives, the saved file)."""
    text, _, expected = reference(tiny_model_path, chinwag_home / "kv")
    assert first_chat(tiny_model_path) == text
    (path,) = list((chinwag_home / "kv").rglob("*.safetensors"))
    return text, expected, path


def rewrite(path, change) -> bytes:
    """Apply change(arrays, meta) and write the file with a checksum that matches it, so only the
    property changed is wrong; the new bytes."""
    arrays, meta = mx.load(str(path), return_metadata=True)
    arrays = dict(arrays)
    mx.eval(list(arrays.values()))
    change(arrays, meta)
    meta["checksum"] = cache_file.checksum(arrays, meta)
    path.unlink()
    mx.save_safetensors(str(path), arrays, meta)
    return path.read_bytes()


def stale(path, change) -> bytes:
    """Apply change(arrays, meta) but keep the old checksum: a valid file whose contents changed."""
    arrays, meta = mx.load(str(path), return_metadata=True)
    arrays = dict(arrays)
    mx.eval(list(arrays.values()))
    change(arrays, meta)
    path.unlink()
    mx.save_safetensors(str(path), arrays, meta)
    return path.read_bytes()


def flip_bytes(path) -> bytes:
    """Damage bytes in the middle of the tensors' data (after the safetensors header)."""
    raw = bytearray(path.read_bytes())
    data_start = 8 + int.from_bytes(raw[:8], "little")
    middle = data_start + (len(raw) - data_start) // 2
    for i in range(middle, middle + 16):
        raw[i] ^= 0x5A
    path.write_bytes(bytes(raw))
    return bytes(raw)


def history(meta, change):
    import json

    data = json.loads(meta["history"])
    change(data)
    meta["history"] = json.dumps(data)


def _first_id_plus_one(data):
    first = next(s for s in data["spans"] if s)
    first[3][0] = (first[3][0] + 1) % 300


HOSTILE = {
    "corrupt bytes": flip_bytes,
    "flipped value, valid file": lambda p: stale(p, lambda a, m: a.update({"0.keys": a["0.keys"] + 1})),
    "wrong shape": lambda p: rewrite(
        p, lambda a, m: a.update({"0.keys": a["0.keys"][:, :1], "0.values": a["0.values"][:, :1]})
    ),
    "too few tokens in a layer": lambda p: rewrite(
        p, lambda a, m: a.update({"1.keys": a["1.keys"][:, :, :-1], "1.values": a["1.values"][:, :, :-1]})
    ),
    "wrong layer count": lambda p: rewrite(p, lambda a, m: (a.pop("1.keys"), a.pop("1.values"), m.update(layers="1"))),
    "wrong dtype": lambda p: rewrite(
        p, lambda a, m: a.update({k: v.astype(mx.float16) for k, v in a.items() if k != "token_ids"})
    ),
    "ids outside the vocabulary": lambda p: rewrite(
        p, lambda a, m: a.update(token_ids=mx.concatenate([a["token_ids"][:-1], mx.array([10**6], dtype=mx.int32)]))
    ),
    "history ids outside the vocabulary": lambda p: rewrite(
        p, lambda a, m: history(m, lambda d: next(s for s in d["spans"] if s)[3].append(10**6))
    ),
    "history that disagrees with the ids": lambda p: rewrite(p, lambda a, m: history(m, _first_id_plus_one)),
    "history start past its messages": lambda p: rewrite(p, lambda a, m: history(m, lambda d: d.update(start=99))),
    "history not JSON": lambda p: rewrite(p, lambda a, m: m.update(history="{")),
    "another conversation's file": lambda p: rewrite(p, lambda a, m: m.update(conversation="other")),
    "larger than any cache of the model": lambda p: (os.truncate(p, 200 << 20), b"")[1],  # sparse: no disk used
    "an older format without a checksum": lambda p: stale(p, lambda a, m: (m.pop("checksum"), m.pop("format"))),
}


def assert_fresh_and_not_saved_again(tiny_model, path, bad: bytes, reply, stats, expected):
    assert stats.reused_tokens == 0, "the bad cache was used"
    assert reply == expected
    assert path.is_file() and not path.is_symlink() and path.read_bytes() != bad
    # What close saved is the fresh cache, and it passes every check.
    model, _ = tiny_model
    assert cache_file.read(path, cache_file.layout_of(model, 2048), CONV) is not None


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_saved_cache_is_dropped_and_the_chat_read_again(saved, tiny_model_path, tiny_model, case, caplog):
    text, expected, path = saved
    bad = HOSTILE[case](path)
    with caplog.at_level(logging.WARNING):
        reply, stats, _ = follow_up(tiny_model_path, text)
    dropped = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert len(dropped) == 1 and "\n" not in dropped[0].getMessage() and not dropped[0].exc_info
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no bug
    assert_fresh_and_not_saved_again(tiny_model, path, bad, reply, stats, expected)


def test_the_capacity_reserved_comes_from_the_tokens_held_not_the_file(saved, tiny_model_path):
    text, _, path = saved
    intact = reference(tiny_model_path, None)[1]
    rewrite(path, lambda a, m: m.update(capacity=str(10**7)))
    reply, stats, memory = follow_up(tiny_model_path, text)
    assert stats.reused_tokens > 0 and reply == intact  # a sound cache is used, as if intact
    assert memory.positions_reserved <= 2048 and memory.kv_bytes < 4 << 20


def test_a_named_pipe_at_a_cache_path_blocks_nothing(saved, tiny_model_path, tiny_model):
    text, expected, path = saved
    path.unlink()
    os.mkfifo(path)
    result: list = []
    worker = threading.Thread(target=lambda: result.append(follow_up(tiny_model_path, text)), daemon=True)
    worker.start()
    worker.join(120)
    if worker.is_alive():  # unblock the engine thread so the test run can end
        with open(path, "wb"):
            pass
        pytest.fail("a named pipe at a saved cache's path blocked the engine")
    reply, stats, _ = result[0]
    assert_fresh_and_not_saved_again(tiny_model, path, b"", reply, stats, expected)


@pytest.mark.parametrize("target", ["nowhere", "a good cache elsewhere"])
def test_a_symlink_at_a_cache_path_is_never_followed(saved, tiny_model_path, tiny_model, tmp_path, target):
    text, expected, path = saved
    elsewhere = tmp_path / "elsewhere.safetensors"
    if target != "nowhere":
        path.rename(elsewhere)
        kept = elsewhere.read_bytes()
    else:
        path.unlink()
    path.symlink_to(elsewhere)
    reply, stats, _ = follow_up(tiny_model_path, text)
    assert_fresh_and_not_saved_again(tiny_model, path, b"", reply, stats, expected)
    if target != "nowhere":
        assert elsewhere.read_bytes() == kept  # the save never wrote through the link


def dangling(kv, name="gone.safetensors"):
    folder = next(p for p in kv.iterdir() if p.is_dir())
    (folder / name).symlink_to(folder / "no-such-file")
    (folder / "pipe.safetensors").unlink(missing_ok=True)
    os.mkfifo(folder / "pipe.safetensors")


def test_close_with_a_dangling_symlink_and_a_pipe_in_kv_does_not_raise(tiny_model_path, chinwag_home):
    async def body(engine):
        await turn(engine, CONV, FIRST, GREEDY)
        await turn(engine, "other", [{"role": "user", "content": "Hello"}], GREEDY)
        await asyncio.wrap_future(engine._local.thread.submit(engine._local.session.caches.save_all))
        dangling(chinwag_home / "kv")

    run_with_engine(tiny_model_path, body)  # close saves again and prunes: it must not raise
    names = sorted(p.name for p in (chinwag_home / "kv").rglob("*.safetensors"))
    assert len(names) == 2 and "gone.safetensors" not in names and "pipe.safetensors" not in names


def full_disk(kv, monkeypatch):
    """Every save from now on fails as a full disk does."""

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache_file.Snapshot, "write", no_space)


@pytest.mark.parametrize("trouble", [dangling, full_disk], ids=["a dangling symlink in kv", "a full disk"])
def test_a_model_switch_in_trouble_leaves_no_old_cache(tiny_model_path, chinwag_home, tmp_path, trouble, monkeypatch):
    """The switch succeeds, and the new weights never run on the old model's caches."""
    from tests.tiny_model import build_tiny_model

    other = build_tiny_model(tmp_path / "other", seed=1)
    expected = run_with_engine(other, lambda engine: turn(engine, CONV, FIRST, GREEDY))[0]
    for f in (chinwag_home / "kv").rglob("*.safetensors"):
        f.unlink()

    async def body(engine):
        await turn(engine, CONV, FIRST, GREEDY)
        await asyncio.wrap_future(engine._local.thread.submit(engine._local.session.caches.save_all))
        if trouble is dangling:
            dangling(chinwag_home / "kv")
        else:
            trouble(chinwag_home / "kv", monkeypatch)
        await engine.load_model(str(other))  # must not raise
        assert (await engine.memory_stats()).conversations_in_memory == 0
        return await turn(engine, CONV, FIRST, GREEDY)

    reply, stats = run_with_engine(tiny_model_path, body)
    assert stats.reused_tokens == 0 and reply == expected


def test_a_saved_cache_another_process_deleted_costs_a_re_read(tiny_model_path, chinwag_home, caplog):
    """Evicted to disk, then deleted by someone else: the chat is read again, and close and pruning
    (which listed the file) do not raise."""

    async def body(engine):
        await turn(engine, CONV, FIRST, GREEDY)
        await turn(engine, "other", [{"role": "user", "content": "Hello"}], GREEDY)  # evicts CONV to disk
        await asyncio.to_thread(engine._local.session.caches.writer.flush)  # written on the writer's thread
        saved = list((chinwag_home / "kv").rglob("*.safetensors"))
        assert saved
        for f in saved:
            f.unlink()
        reply, stats = await turn(engine, CONV, follow("x"), GREEDY)
        return stats

    with caplog.at_level(logging.WARNING):
        stats = run_with_engine(tiny_model_path, body, memory_budget_bytes=1)
    assert stats.reused_tokens == 0 and stats.finish_reason in ("stop", "length")
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_closing_right_after_a_chat_logs_no_bug(tiny_model_path, caplog):
    async def body(engine):
        # A reply near the context limit queues the next window's preparation; close comes first.
        return await turn(engine, CONV, FIRST, GREEDY)

    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            run_with_engine(tiny_model_path, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]
