"""KV memory held against tokens held, across 10 conversations of mixed lengths
under a memory budget that cannot hold them all; evictions, restores and their cost.

Part A drives the Engine on the tiny model (a throwaway CHINWAG_HOME): ten conversations
are opened one after the other, then each gets a follow-up turn, oldest first, so the
evicted ones come back from disk, and the last one a second follow-up (from memory). After every turn it records the tokens held and the
bytes reserved by the caches in memory (read on the engine thread from the Session's
ConversationCaches: the Engine has no public hook for this yet).

Part B times the save (eviction) and restore of caches shaped like the starter model's
(30 layers, 3 KV heads of 64, float32) through engine.context.memory.ConversationCaches, with
random contents, against the prefill they spare (prefill speed from figure 2).

    python -m bench.figures.memory [--budget-mb 6]
"""

import argparse
import asyncio
import math
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, timed_chat
from bench.figures.linux_blas import BEST
from bench.reporting import COLORS, Figure, f, mb, pyplot, table

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


def previous_save(path, conv_id, cache) -> None:
    """How an eviction was saved before 2026-12-02, all on the engine thread: a contiguous copy of
    each layer's valid prefix, the checksum, mx.save_safetensors and the fsync."""
    import json

    import mlx.core as mx

    from engine.atomic import replacing
    from engine.context import cache_file
    from engine.paths import FILE_MODE, private_dir

    arrays = {"token_ids": mx.array(cache.token_ids, dtype=mx.int32)}
    for i, layer in enumerate(cache.layers):
        keys, values = layer.state
        arrays[f"{i}.keys"], arrays[f"{i}.values"] = mx.contiguous(keys), mx.contiguous(values)
    mx.eval(list(arrays.values()))
    meta = {"format": cache_file.FORMAT, "conversation": conv_id, "history": json.dumps(cache.history.to_json())}
    meta["layers"] = str(len(cache.layers))
    meta["checksum"] = cache_file.checksum(arrays, meta)
    private_dir(path.parent, "KV cache folder")
    with replacing(path, mode=FILE_MODE) as tmp:
        mx.save_safetensors(str(tmp), arrays, meta)


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
        evicts, before, written, restores, engine_restores = [], [], [], [], []
        for rep in range(reps):
            caches = ConversationCaches(budget_bytes=0, save_dir=folder)
            # What a saved cache must hold to be restored (engine/context/cache_file.py): the starter's shape.
            layout = CacheLayout([(heads, dim)] * layers_n, STARTER_VOCAB, max(STARTER_SIZES), lambda: mx.float32)
            caches.set_model("bench-starter-shape", layout)
            layers = []
            for _ in range(layers_n):
                k = mx.random.normal((1, heads, n, dim))
                v = mx.random.normal((1, heads, n, dim))
                # Room for twice the tokens held, as just after a doubling: the snapshot copies the valid prefix.
                layers.append(ContiguousAttentionKVCache.from_state((k, v), 2 * n))
            mx.eval([c.keys for c in layers] + [c.values for c in layers])
            conv = ConversationCache(layers=layers, token_ids=list(range(n)))
            nbytes = conv.nbytes
            for side in ("before", "now") if rep % 2 == 0 else ("now", "before"):
                t = time.perf_counter()
                if side == "before":  # the previous behaviour: the whole save on the engine thread
                    previous_save(caches._path("b"), "b", conv)
                    before.append(time.perf_counter() - t)
                    caches.forget("b")
                    continue
                caches.put("a", conv)
                caches.enforce(keep="")  # budget 0: evicted; its file is written on the writer's thread
                evicts.append(time.perf_counter() - t)
                caches.writer.flush()
                written.append(time.perf_counter() - t)
            del conv, layers
            restored_before = caches.stats.restore_seconds
            t = time.perf_counter()
            restored = caches.get("a")  # written: restored from the file
            mx.eval([c.keys for c in restored.layers] + [c.values for c in restored.layers])
            restores.append(time.perf_counter() - t)
            engine_restores.append(caches.stats.restore_seconds - restored_before)
            caches.forget("a")
        rows.append(
            {
                "tokens": n,
                "bytes": nbytes,
                "evict_s": median(evicts),
                "save_before_s": median(before),
                "written_s": median(written),
                "restore_s": median(restores),
                "engine_counted_restore_s": median(engine_restores),
            }
        )
        log(
            f"starter-shaped cache of {n} tokens ({nbytes / 1e6:.0f} MB): eviction {rows[-1]['evict_s'] * 1e3:.0f} ms "
            f"on the engine thread (before: {rows[-1]['save_before_s'] * 1e3:.0f} ms), on disk after "
            f"{rows[-1]['written_s'] * 1e3:.0f} ms, restore {rows[-1]['restore_s'] * 1e3:.0f} ms"
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
        f"python -m bench.figures.memory --budget-mb {args.budget_mb} --reps {args.reps}",
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
    tl, per = d["timeline"], d["kv_bytes_per_token"]
    budget = d["params"]["budget_bytes"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.4))
    xs = [r["tokens_held"] for r in tl]
    a1.scatter(xs, [r["kv_bytes"] / 2**20 for r in tl], color=COLORS["chinwag"], s=14, label="KV bytes held (reserved)")
    top = max(xs) * 1.05
    a1.plot([0, top], [0, top * per / 2**20], color="k", lw=1, label="exactly the tokens held")
    a1.plot([0, top], [0, 2 * top * per / 2**20], color="k", lw=1, ls=":", label="twice that")
    a1.axhline(budget / 2**20, color="r", lw=1, ls="--", label="budget")
    a1.set_xlabel("tokens held in memory (all conversations)")
    a1.set_ylabel("MiB")
    a1.set_title("KV memory against tokens held (tiny model)")
    a1.legend(fontsize=7)
    steps = [r["step"] for r in tl]
    a2.plot(steps, [r["kv_bytes"] / 2**20 for r in tl], "o-", color=COLORS["chinwag"], label="KV bytes held")
    a2.axhline(budget / 2**20, color="r", lw=1, ls="--", label="budget")
    a2b = a2.twinx()
    a2b.plot(steps, [r["evictions"] for r in tl], "-", color="#9467bd", label="evictions (cumulative)")
    a2b.plot(steps, [r["restores"] for r in tl], "-", color="#8c564b", label="restores (cumulative)")
    a2b.set_ylabel("count")
    a2b.grid(False)
    a2.axvline(len(tl) / 2 + 0.5, color="k", lw=0.5)
    a2.set_xlabel("turn (1-10: new chats; then a follow-up in each, the last one twice)", labelpad=1)
    a2.set_ylabel("MiB")
    a2.set_title("Over the session")
    lines = a2.get_legend_handles_labels()
    lines2 = a2b.get_legend_handles_labels()
    a2.legend(
        lines[0] + lines2[0], lines[1] + lines2[1], fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2
    )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(d, res):
    s, p, tl = d["summary"], d["params"], d["timeline"]
    per = d["kv_bytes_per_token"]
    rows = [
        [
            r["step"],
            r["conv"],
            r["kind"],
            r["prompt_tokens"],
            r["reused_tokens"],
            r["kv_capacity"],
            r["tokens_held"],
            mb(r["kv_bytes"]),
            r["in_memory"],
            r["evictions"],
            r["restores"],
            f(r["ttft_s"] * 1e3, 0),
        ]
        for r in tl
    ]
    sr = d["starter_save_restore"]
    out = [
        f"The Engine on the tiny model with `memory_budget_bytes` = {mb(p['budget_bytes'])}: ten new conversations "
        f"of {', '.join(map(str, p['lengths']))}-ish tokens (greedy replies of {p['reply_tokens']}), then one "
        f"follow-up in each, oldest first, so evicted caches come back from disk, and a second follow-up in the "
        f"last one, from memory. After each turn: the tokens "
        f"held and the bytes reserved by the caches in memory (read from the engine's `ConversationCaches`; the "
        f"Engine has no public hook for it yet, see below).",
        "",
        table(
            [
                "turn",
                "conversation",
                "kind",
                "prompt",
                "reused",
                "its capacity",
                "tokens held (all)",
                "KV held (all)",
                "in memory",
                "evictions",
                "restores",
                "TTFT ms",
            ],
            rows,
        ),
        "",
        f"Bytes reserved per byte needed (median over the turns): **{s['bytes_over_exact']:.2f}x** — each cache "
        f"reserves a power of two of positions, so up to 2x just after a doubling. Peak held: "
        f"{mb(s['peak_kv_bytes'])} for {s['peak_tokens_held']:,} tokens (exact: {mb(s['peak_tokens_held'] * per)}). "
        f"{s['evictions']} evictions at {f(s['save_ms_per_eviction'], 1)} ms each and {s['restores']} restores at "
        f"{f(s['restore_ms_per_restore'], 1)} ms each (engine's `MemoryStats`; tiny caches). A follow-up whose cache "
        f"was restored had a median TTFT of {f(s['followup_ttft_restored_s'] * 1e3, 0)} ms; "
        + (
            f"one still in memory {f(s['followup_ttft_in_memory_s'] * 1e3, 0)} ms. "
            if not math.isnan(s["followup_ttft_in_memory_s"])
            else "none was still in memory. "
        )
        + f"Peak process memory (RSS) of the benchmark process, Engine and tiny model included: "
        f"{mb(s['peak_rss_bytes'])}." + _restored_capacity_note(tl),
        "",
        "Save and restore of caches shaped like the starter's (30 layers, 3 KV heads of 64, float32; random "
        "contents) through `engine.context.memory.ConversationCaches`, against the prefill they spare (prefill speeds from "
        "figure 6). An eviction's file is written on a thread of its own (`engine/context/cache_writer.py`): the engine "
        "thread only takes a snapshot: views of the cache's buffers, one per head (each cache here has room for twice "
        "its tokens, as just after a doubling). *Before* is the previous behaviour in the same run, interleaved: the "
        "whole save on the engine thread (a contiguous copy of the prefix, the checksum, `mx.save_safetensors`, the "
        "fsync; `previous_save` here).",
        "",
    ]
    lb = res.get("linux_blas", {}).get("summary", {})
    rates = [(name, lb[name]["prefill_tps"]) for name in ("reference BLAS, quantized", BEST) if name in lb]
    out.append(
        table(
            [
                "tokens",
                "cache size",
                "eviction, engine thread ms",
                "before: the whole save there, ms",
                "on disk after, ms",
                "restore ms (read included)",
                "restore ms as the engine counts it",
            ]
            + [f"re-prefill instead, s ({n}: {r:.0f} tok/s)" for n, r in rates],
            [
                [
                    f"{r['tokens']:,}",
                    mb(r["bytes"]),
                    f(r["evict_s"] * 1e3, 0),
                    f(r["save_before_s"] * 1e3, 0),
                    f(r["written_s"] * 1e3, 0),
                    f(r["restore_s"] * 1e3, 0),
                    f(r["engine_counted_restore_s"] * 1e3, 1),
                ]
                + [f(r["tokens"] / rate, 1) for _, rate in rates]
                for r in sr
            ],
        )
    )
    out += [
        "",
        "`mx.load` is lazy: the engine's `restore_seconds` stops before the file is read; the read happens "
        "at the restored turn's first evaluation. The column with the read included is the real cost.",
    ]
    return out


def _restored_capacity_note(tl) -> str:
    saved = {}
    for r in tl:
        if r["kind"] == "new":
            saved[r["conv"]] = (r["kv_capacity"], r["kv_offset"])
        elif r.get("restored") and r["conv"] in saved:
            cap, held = saved[r["conv"]]
            if r["kv_capacity"] > cap and r["kv_offset"] <= cap:
                return (
                    f" Restored caches come back larger than they were saved: `ContiguousAttentionKVCache.from_state` "
                    f"doubles from the positions held until the saved capacity fits, instead of allocating that "
                    f"capacity (e.g. {r['conv']}: {held:,} positions saved at capacity {cap:,}, back at "
                    f"{r['kv_capacity']:,}), hence the capacities that are not powers of two."
                )
    return ""


def headline(d, res):
    s = d["summary"]
    return [
        [
            "KV bytes reserved / bytes needed",
            f"{s['bytes_over_exact']:.2f}",
            f"{s['evictions']} evictions, {s['restores']} restores under the budget",
        ]
    ] + [
        [
            f"eviction of a starter-shaped cache of {r['tokens']:,} tokens: engine-thread time, before / now",
            f"{r['save_before_s'] / r['evict_s']:.0f}x" if r["evict_s"] else "",
            f"{r['save_before_s'] * 1e3:.0f} → {r['evict_s'] * 1e3:.0f} ms; the file is written on its own thread",
        ]
        for r in d["starter_save_restore"][-1:]
        if "evict_s" in r
    ]


FIGURE = Figure(name="memory", title="Memory across conversations", section=section, plot=plot, headline=headline)


if __name__ == "__main__":
    main()
