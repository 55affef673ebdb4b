"""One scripted chat on a model: 7 turns past its window, regenerate, edits, a version switch, a
read-ahead draft, a sliding context cap, a fork, a restart and an eviction, each step's stats kept;
and new chats sharing a ~1.5K-token system prompt, before and after the restart.

tests/engine/test_families.py runs it on every family's fixture and checks the stats;
bench/figures/families.py reports the reuse it shows.
"""

import asyncio
from dataclasses import dataclass, field

from engine import Engine, GenerationParams
from tests.tiny_families import WINDOW
from tests.turns import collect

MAX = 12
GREEDY = GenerationParams(temperature=0.0, max_tokens=MAX)
SYSTEM = {"role": "system", "content": "You are a helpful assistant who answers briefly."}
QUESTIONS = [
    "Hello, how are you today?",
    "What is the capital of France?",
    "Tell me a story about a cat.",
    "Numbers 0 1 2 3 4 5 6 7 8 9 and code.",
    "Markdown has headings, lists and tables.",
    "The quick brown fox jumps over the lazy dog.",
    "A chat app keeps every conversation.",
]
# About 1,500 tokens of the tiny tokenizer: new chats with it start from another chat's cache.
LONG_SYSTEM = {
    "role": "system",
    "content": " ".join(
        f"Rule {i}: when asked about topic {i}, answer in {i % 5 + 1} short sentences and cite the source."
        for i in range(26)
    ),
}


def _shared(question: str) -> list:
    return [LONG_SYSTEM, {"role": "user", "content": question}]


@dataclass
class Script:
    """What one chat recorded: the 7 turns' stats, then each later step's result by name."""

    steps: dict = field(default_factory=dict)
    turns: list = field(default_factory=list)


async def _turn(engine, conv, messages, params=GREEDY):
    text, stats = await collect(engine, conv, messages, params)
    assert stats is not None and not stats.error, stats
    return text, stats


def _with_replies(texts):
    messages = [SYSTEM]
    for q, a in zip(QUESTIONS, texts):
        messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
    return messages


async def run_chat(path, **options) -> Script:
    """The script on the model at `path`; `options` go to both engines (e.g. kv_quantization)."""
    s = Script()
    engine = Engine(**options)
    try:
        await engine.load_model(str(path))
        texts = []
        for q in QUESTIONS:  # 7 turns, far past the window
            text, stats = await _turn(engine, "c", _with_replies(texts) + [{"role": "user", "content": q}])
            s.turns.append(stats)
            texts.append(text)
        last = _with_replies(texts[:-1]) + [{"role": "user", "content": QUESTIONS[-1]}]
        _, s.steps["regenerate"] = await _turn(engine, "c", last)
        edited = last[:-1] + [{"role": "user", "content": "A chat app keeps every message."}]
        _, s.steps["edit last"] = await _turn(engine, "c", edited)
        middle = [dict(m) for m in last]
        middle[5] = {"role": "user", "content": "Tell me a story about a dog."}
        _, s.steps["edit middle"] = await _turn(engine, "c", middle)
        _, s.steps["switch back"] = await _turn(engine, "c", last)
        draft = _with_replies(texts) + [{"role": "user", "content": "Please"}]
        s.steps["read ahead"] = await engine.prefill("c", draft, GREEDY)
        sent = draft[:-1] + [{"role": "user", "content": "Please summarise the chat so far in one line."}]
        answer, s.steps["after draft"] = await _turn(engine, "c", sent)
        capped = GenerationParams(temperature=0.0, max_tokens=MAX, context_cap=8 * WINDOW)
        _, s.steps["slide"] = await _turn(engine, "capped", sent, capped)
        _, s.steps["slide again"] = await _turn(
            engine,
            "capped",
            sent + [{"role": "assistant", "content": "Sure."}, {"role": "user", "content": "More?"}],
            capped,
        )
        fork = await engine.fork("c", "f", last[:4], GREEDY)
        s.steps["fork"] = fork
        _, s.steps["forked turn"] = await _turn(engine, "f", last[:4])
        _, s.steps["shared first"] = await _turn(engine, "s1", _shared(QUESTIONS[0]))
        _, s.steps["shared second"] = await _turn(engine, "s2", _shared(QUESTIONS[1]))
    finally:
        await engine.close()
    engine = Engine(
        memory_budget_bytes=1, **options
    )  # a restart (the caches saved at close), and every other chat evicted
    try:
        await engine.load_model(str(path))
        follow = sent + [{"role": "assistant", "content": answer}, {"role": "user", "content": "Thanks!"}]
        thanks, s.steps["after restart"] = await _turn(engine, "c", follow)
        await _turn(engine, "other", [{"role": "user", "content": "Hello"}])  # evicts "c" to disk
        await asyncio.to_thread(engine._local.session.caches.writer.flush)
        again = follow + [{"role": "assistant", "content": thanks}, {"role": "user", "content": "Bye!"}]
        _, s.steps["after eviction"] = await _turn(engine, "c", again)
        _, s.steps["shared after restart"] = await _turn(engine, "s3", _shared(QUESTIONS[2]))  # from a saved file
    finally:
        await engine.close()
    return s
