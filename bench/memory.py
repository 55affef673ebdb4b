"""Figure 4: KV memory held against tokens held, across 10 conversations of mixed lengths
under a memory budget that cannot hold them all; evictions, restores and their cost.

Part A drives the Engine on the tiny model (a throwaway CHINWAG_HOME): ten conversations
are opened one after the other, then each gets a follow-up turn, oldest first, so the
evicted ones come back from disk, and the last one a second follow-up (from memory). After every turn it records the tokens held and the
bytes reserved by the caches in memory (read on the engine thread from the Session's
ConversationCaches: the Engine has no public hook for this yet).

Part B times the save (eviction) and restore of caches shaped like the starter model's
(30 layers, 3 KV heads of 64, float32) through engine.context.memory.ConversationCaches, with
random contents, against the prefill they spare (prefill speed from figure 2).

    python -m bench.memory [--budget-mb 6]
"""

import argparse
import asyncio
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, timed_chat

# Prompt lengths in tiny-model tokens: short and long chats mixed.
LENGTHS = [150, 400, 900, 1800, 3500, 250, 700, 2500, 5000, 1200]
REPLY_TOKENS = 32
STARTER_SHAPE = (30, 3, 64)  # layers, KV heads, head dim
STARTER_SIZES = [512, 2048, 8192]
STARTER_VOCAB = 49152


def message_of(tokenizer, n_tokens: int) -> str:
    unit = "The quick brown fox jumps over the lazy dog. A chat app keeps every conversation. "
    per = len(tokenizer.encode(unit).ids)
    return unit * max(1, round(n_tokens / per))


def snapshot(report) -> dict:
    """An Engine.memory_stats() report as this figure's row."""
    return {
        "in_memory": report.conversations_in_memory,
        "tokens_held": report.tokens_held,
        "positions_reserved": report.positions_reserved,
        "kv_bytes": report.kv_bytes,
        "evictions": report.evictions,
        "restores": report.restores,
        "save_s": report.save_seconds,
        "restore_s": report.restore_seconds,
        "budget_bytes": report.budget_bytes,
    }


async def part_a(budget_bytes: int, lengths: list) -> dict:
    from tokenizers import Tokenizer

    from engine import Engine, GenerationParams

    home = common.temp_home()
    path = common.tiny_model(context_length=16384)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    engine = Engine(memory_budget_bytes=budget_bytes)
    await engine.load_model(str(path))
    params = GenerationParams(temperature=0.0, max_tokens=REPLY_TOKENS)
    histories = {f"conv{i}": [{"role": "user", "content": message_of(tok, n)}] for i, n in enumerate(lengths)}
    timeline = []

    async def turn(conv, kind):
        ttft, text, stats = await timed_chat(engine, conv, histories[conv], params)
        histories[conv].append({"role": "assistant", "content": text})
        snap = snapshot(await engine.memory_stats())
        row = {
            "step": len(timeline) + 1,
            "conv": conv,
            "kind": kind,
            "ttft_s": ttft,
            "prompt_tokens": stats.prompt_tokens,
            "reused_tokens": stats.reused_tokens,
            "prefilled_tokens": stats.prefilled_tokens,
            "kv_capacity": stats.kv_capacity,
            "kv_offset": stats.kv_offset,
            "rss_bytes": common.rss_bytes(),
            **snap,
        }
        timeline.append(row)
        log(
            f"{kind} {conv}: prompt {stats.prompt_tokens} (reused {stats.reused_tokens}), held "
            f"{snap['tokens_held']} tokens in {snap['kv_bytes'] / 1e6:.2f} MB, {snap['in_memory']} in memory, "
            f"{snap['evictions']} evictions, {snap['restores']} restores"
        )

    for conv in histories:
        await turn(conv, "new")
    for conv in list(histories) + [list(histories)[-1]]:  # the last one twice: once from memory
        histories[conv].append({"role": "user", "content": "Thank you. And what happened next?"})
        before = timeline[-1]["restores"]
        await turn(conv, "follow-up")
        timeline[-1]["restored"] = timeline[-1]["restores"] > before
    bytes_per_token = 2 * 2 * 16 * 2 * 4  # tiny model: 2 layers, 2 KV heads of 16, K+V, float32
    await engine.close()
    return {
        "timeline": timeline,
        "home": str(home),
        "kv_bytes_per_token": bytes_per_token,
        "peak_rss_bytes": common.peak_rss_bytes(),
    }


def part_b(reps: int) -> list:
    import tempfile

    import mlx.core as mx

    from engine.context.cache_file import CacheLayout
    from engine.context.conversation import ConversationCache
    from engine.context.kv_cache import ContiguousAttentionKVCache
    from engine.context.memory import ConversationCaches

    layers_n, heads, dim = STARTER_SHAPE
    rows = []
    folder = tempfile.mkdtemp(prefix="chinwag-bench-kv-")
    for n in STARTER_SIZES:
        saves, restores, engine_restores = [], [], []
        for _rep in range(reps):
            caches = ConversationCaches(budget_bytes=0, save_dir=folder)
            # What a saved cache must hold to be restored (engine/context/cache_file.py): the starter's shape.
            layout = CacheLayout([(heads, dim)] * layers_n, STARTER_VOCAB, max(STARTER_SIZES), lambda: mx.float32)
            caches.set_model("bench-starter-shape", layout)
            layers = []
            for _ in range(layers_n):
                k = mx.random.normal((1, heads, n, dim))
                v = mx.random.normal((1, heads, n, dim))
                layers.append(ContiguousAttentionKVCache.from_state((k, v)))
            mx.eval([c.keys for c in layers] + [c.values for c in layers])
            conv = ConversationCache(layers=layers, token_ids=list(range(n)))
            nbytes = conv.nbytes
            caches.put("a", conv)
            caches.enforce(keep="")  # budget 0: saved to disk and dropped
            del conv, layers
            t = time.perf_counter()
            restored = caches.get("a")
            # mx.load is lazy: the file is read here, at the first eval, not inside get()
            mx.eval([c.keys for c in restored.layers] + [c.values for c in restored.layers])
            restores.append(time.perf_counter() - t)
            saves.append(caches.stats.save_seconds)
            engine_restores.append(caches.stats.restore_seconds)
            caches.forget("a")
        rows.append(
            {
                "tokens": n,
                "bytes": nbytes,
                "save_s": median(saves),
                "restore_s": median(restores),
                "engine_counted_restore_s": median(engine_restores),
            }
        )
        log(
            f"starter-shaped cache of {n} tokens ({nbytes / 1e6:.0f} MB): save {rows[-1]['save_s'] * 1e3:.0f} ms, "
            f"restore {rows[-1]['restore_s'] * 1e3:.0f} ms"
        )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-mb", type=float, default=6.0)
    p.add_argument("--reps", type=int, default=common.reps(3))
    args = p.parse_args(argv)
    started = time.perf_counter()
    lengths = [n // 4 for n in LENGTHS] if common.QUICK else LENGTHS
    budget = int(args.budget_mb * 1e6 / (4 if common.QUICK else 1))
    a = asyncio.run(part_a(budget, lengths))
    b = part_b(args.reps)
    tl = a["timeline"]
    restored = [r for r in tl if r.get("restored")]
    in_mem = [r for r in tl if r["kind"] == "follow-up" and not r.get("restored")]
    summary = {
        "peak_tokens_held": max(r["tokens_held"] for r in tl),
        "peak_kv_bytes": max(r["kv_bytes"] for r in tl),
        "final": tl[-1],
        "bytes_over_exact": median([r["kv_bytes"] / (r["tokens_held"] * a["kv_bytes_per_token"]) for r in tl]),
        "evictions": tl[-1]["evictions"],
        "restores": tl[-1]["restores"],
        "save_ms_per_eviction": 1e3 * tl[-1]["save_s"] / max(1, tl[-1]["evictions"]),
        "restore_ms_per_restore": 1e3 * tl[-1]["restore_s"] / max(1, tl[-1]["restores"]),
        "followup_ttft_restored_s": median([r["ttft_s"] for r in restored]),
        "followup_ttft_in_memory_s": median([r["ttft_s"] for r in in_mem]),
        "peak_rss_bytes": a["peak_rss_bytes"],
    }
    common.save(
        "memory",
        {
            "params": {
                "budget_bytes": budget,
                "lengths": lengths,
                "reply_tokens": REPLY_TOKENS,
                "starter_sizes": STARTER_SIZES,
                "reps": args.reps,
            },
            "timeline": tl,
            "kv_bytes_per_token": a["kv_bytes_per_token"],
            "starter_save_restore": b,
            "summary": summary,
        },
        f"python -m bench.memory --budget-mb {args.budget_mb} --reps {args.reps}",
        started,
    )
    common.finish()


if __name__ == "__main__":
    main()
