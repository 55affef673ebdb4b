"""Per-token decode latency while the KV cache grows, ContiguousAttentionKVCache
(engine/context/kv_cache.py: starts at 256 positions, doubles) against mlx-lm's KVCache (grows by
256 positions with a concatenation), decoding until 16K positions are held, on the tiny model.

Each token is one synchronous step (forward pass, argmax, mx.eval), so its time is its
own. The two caches alternate: A B B A ... Bytes copied by growth: the engine's counter
for ContiguousAttentionKVCache; for KVCache, the positions held when it concatenated.
Peak memory: MLX's allocator peak (mx.get_peak_memory) over each run. Last, one growth
at 8K positions of caches shaped like the starter's (30 layers), timed alone (KV writes only).

    python -m bench.figures.growth [--tokens 16380] [--reps 2]
"""

import argparse
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, percentile
from bench.reporting import COLORS, Figure, f, mb, pyplot, table

INITIAL_CAPACITY = 256  # engine/context/conversation.py MIN_INITIAL_CAPACITY: a short chat's start
STARTER_KV_BYTES_PER_TOKEN = 30 * 3 * 64 * 2 * 4  # 30 layers, 3 KV heads of 64, K+V, float32


def make_cache(kind, model):
    from mlx_lm.models.cache import make_prompt_cache

    from engine.context.conversation import layer_shapes
    from engine.context.kv_cache import ContiguousAttentionKVCache

    if kind == "contiguous":
        return [ContiguousAttentionKVCache(h, d, max_seq_len=INITIAL_CAPACITY) for h, d in layer_shapes(model)]
    return make_prompt_cache(model)


def capacity(kind, layers):
    c = layers[0]
    if kind == "contiguous":
        return c.max_seq_len
    return 0 if c.keys is None else c.keys.shape[2]


def run(kind, model, n_tokens):
    import mlx.core as mx

    layers = make_cache(kind, model)
    per_token = sum(2 * h * d * 4 for h, d in _shapes(model))  # K and V, float32, all layers
    mx.clear_cache()
    mx.reset_peak_memory()
    prompt = mx.array([[1, 2, 3, 4]])
    y = mx.argmax(model(prompt, cache=layers)[:, -1, :], axis=-1)
    mx.eval(y)
    lat, growth_steps, copied_positions = [], [], 0
    for i in range(n_tokens):
        cap, held = capacity(kind, layers), layers[0].offset
        t = time.perf_counter()
        y = mx.argmax(model(y[None], cache=layers)[:, -1, :], axis=-1)
        mx.eval(y)
        lat.append(time.perf_counter() - t)
        if capacity(kind, layers) != cap:
            growth_steps.append(i)
            if kind == "kvcache" and cap:
                copied_positions += held  # the concatenation copies every position held
    if kind == "contiguous":
        copied = sum(c.bytes_copied for c in layers)
    else:
        copied = copied_positions * per_token
    peak = mx.get_peak_memory()
    growth = set(growth_steps)
    return {
        "kind": kind,
        "tokens": n_tokens,
        "p50_ms": percentile(lat, 50) * 1e3,
        "p99_ms": percentile(lat, 99) * 1e3,
        "max_ms": max(lat) * 1e3,
        "mean_ms": sum(lat) / len(lat) * 1e3,
        "growth_steps": growth_steps,
        "growth_median_ms": median([lat[i] * 1e3 for i in growth]) if growth else 0.0,
        "growth_max_ms": max(lat[i] * 1e3 for i in growth) if growth else 0.0,
        "bytes_copied": copied,
        "positions_copied": copied // per_token,
        "kv_bytes_per_token": per_token,
        "final_capacity": capacity(kind, layers),
        "peak_memory_bytes": peak,
        "latency_us": [round(x * 1e6) for x in lat],
    }


def starter_growth_step(kind, held, reps):
    """ms to write one token into 30 starter-shaped layers (3 KV heads of 64, float32) that hold
    `held` positions and are full, so the write grows them; and ms for the next write (no growth)."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from engine.context.kv_cache import ContiguousAttentionKVCache

    layers_n, heads, dim = 30, 3, 64
    grow, plain = [], []
    for _ in range(reps):
        if kind == "contiguous":
            layers = [
                ContiguousAttentionKVCache(heads, dim, max_seq_len=held, dtype=mx.float32) for _ in range(layers_n)
            ]
        else:
            layers = [KVCache() for _ in range(layers_n)]
        k = mx.random.normal((1, heads, held, dim))
        for c in layers:
            c.update_and_fetch(k, k)
        mx.eval([c.keys for c in layers] + [c.values for c in layers])
        one = mx.random.normal((1, heads, 1, dim))
        mx.eval(one)
        times = []
        for _step in range(2):
            t = time.perf_counter()
            for c in layers:
                c.update_and_fetch(one, one)
            mx.eval([c.keys for c in layers] + [c.values for c in layers])
            times.append(time.perf_counter() - t)
        grow.append(times[0])
        plain.append(times[1])
        del layers, k
        mx.clear_cache()
    return {"grow_ms": median(grow) * 1e3, "next_write_ms": median(plain) * 1e3}


def _shapes(model):
    from engine.context.conversation import layer_shapes

    return layer_shapes(model)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 4 prompt positions + 16380 decoded = 16384 held: both caches end exactly full.
    p.add_argument("--tokens", type=int, default=2044 if common.QUICK else 16380)
    p.add_argument("--reps", type=int, default=common.reps(2))
    args = p.parse_args(argv)
    started = time.perf_counter()

    from engine.local import loading

    model, _tok = loading.load(common.tiny_model(context_length=args.tokens + 64))
    run("contiguous", model, 300)  # warm-up (one growth each)
    run("kvcache", model, 300)
    runs = []
    for rep in range(args.reps):
        for kind in ["contiguous", "kvcache"] if rep % 2 == 0 else ["kvcache", "contiguous"]:
            r = run(kind, model, args.tokens)
            r["rep"] = rep
            if rep:
                r.pop("latency_us")  # one series of each is plotted
            runs.append(r)
            log(
                f"rep {rep} {kind}: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, max {r['max_ms']:.1f} ms, "
                f"copied {r['bytes_copied'] / 1e6:.1f} MB, peak {r['peak_memory_bytes'] / 1e6:.1f} MB"
            )

    summary = {}
    for kind in ("contiguous", "kvcache"):
        rs = [r for r in runs if r["kind"] == kind]
        summary[kind] = {
            k: median([r[k] for r in rs])
            for k in (
                "p50_ms",
                "p99_ms",
                "max_ms",
                "mean_ms",
                "growth_median_ms",
                "growth_max_ms",
                "bytes_copied",
                "positions_copied",
                "peak_memory_bytes",
            )
        }
        summary[kind]["growths"] = len(rs[0]["growth_steps"])
        summary[kind]["starter_bytes_copied"] = summary[kind]["positions_copied"] * STARTER_KV_BYTES_PER_TOKEN
    held = 2048 if common.QUICK else 8192
    for kind in ("contiguous", "kvcache"):
        summary[kind]["starter_growth_at"] = held
        summary[kind].update({f"starter_{k}": v for k, v in starter_growth_step(kind, held, args.reps + 1).items()})
        log(
            f"{kind}: one starter-shaped growth at {held} positions {summary[kind]['starter_grow_ms']:.0f} ms, "
            f"next write {summary[kind]['starter_next_write_ms']:.1f} ms"
        )
    summary["p50_ratio"] = summary["kvcache"]["p50_ms"] / summary["contiguous"]["p50_ms"]
    summary["p99_ratio"] = summary["kvcache"]["p99_ms"] / summary["contiguous"]["p99_ms"]
    summary["mean_ratio"] = summary["kvcache"]["mean_ms"] / summary["contiguous"]["mean_ms"]
    common.save(
        "growth",
        {
            "params": {"tokens": args.tokens, "reps": args.reps, "initial_capacity": INITIAL_CAPACITY},
            "runs": runs,
            "summary": summary,
        },
        f"python -m bench.figures.growth --tokens {args.tokens} --reps {args.reps}",
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    labels = {"contiguous": "ContiguousAttentionKVCache (doubling)", "kvcache": "mlx-lm KVCache (+256)"}
    colors = {"contiguous": COLORS["chinwag"], "kvcache": COLORS["mlx_lm"]}
    for r in d["runs"]:
        if "latency_us" not in r:
            continue
        lat = [x / 1e3 for x in r["latency_us"]]
        a1.scatter(range(len(lat)), lat, s=1, alpha=0.15, color=colors[r["kind"]])
        pts = _rolling_median(lat, 256)
        a1.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            color=colors[r["kind"]],
            label=labels[r["kind"]] + ", rolling median",
        )
        for g in r["growth_steps"] if r["kind"] == "contiguous" else []:
            a1.axvline(g, color=colors["contiguous"], lw=0.5, ls=":")
        # cumulative positions copied by growth
        per = r["kv_bytes_per_token"]
        copied, xs, ys = 0, [0], [0]
        for g in r["growth_steps"]:
            copied += g + 4  # positions held when it grew (4 prompt positions): both copy them
            xs += [g, g]
            ys += [ys[-1], copied * per / 2**20]
        xs.append(len(lat))
        ys.append(ys[-1])
        a2.plot(xs, ys, color=colors[r["kind"]], label=labels[r["kind"]])
    a1.set_yscale("log")
    a1.set_xlabel("tokens decoded (dotted: doublings)")
    a1.set_ylabel("per-token latency, ms (log)")
    a1.legend(fontsize=7, loc="upper left")
    a1.set_title("Per-token decode latency, tiny model")
    a2.set_xlabel("tokens decoded")
    a2.set_ylabel("KV bytes copied by growth, MiB (cumulative)")
    a2.set_title("Copying done by growth")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _rolling_median(xs, w):
    import statistics

    out = []
    for i in range(0, len(xs), max(1, w // 4)):
        window = xs[max(0, i - w // 2) : i + w // 2 + 1]
        out.append((i, statistics.median(window)))
    return out


def section(d, res):
    s, p = d["summary"], d["params"]
    c, k = s["contiguous"], s["kvcache"]
    return [
        f"The tiny model (tests/tiny_model.py: 2 layers, 2 KV heads of 16) decodes one token per synchronous "
        f"step until {p['tokens'] + 4:,} positions are held, with each layer's cache either "
        f"`ContiguousAttentionKVCache` starting at {p['initial_capacity']} positions (a short chat's start; it "
        f"doubles) or mlx-lm's `KVCache` (grows by 256 with a concatenation). {p['reps']} repetitions of each, "
        f"alternating (A B B A). Bytes copied: the cache's `bytes_copied` counter, and for `KVCache` the positions "
        f"held at each concatenation. Peak memory: MLX's allocator peak during the run. The tiny model holds 512 "
        f"bytes per position; the last column scales the positions copied to the starter's 46,080 bytes per position.",
        "",
        table(
            [
                "",
                "p50 ms/token",
                "p99 ms/token",
                "max ms",
                "mean ms",
                "growths",
                "median ms of a growth step",
                "bytes copied",
                "peak MLX memory",
                "copied, starter-sized",
            ],
            [
                [
                    "ContiguousAttentionKVCache",
                    f(c["p50_ms"], 3),
                    f(c["p99_ms"], 3),
                    f(c["max_ms"], 1),
                    f(c["mean_ms"], 3),
                    int(c["growths"]),
                    f(c["growth_median_ms"], 2),
                    mb(c["bytes_copied"]),
                    mb(c["peak_memory_bytes"]),
                    mb(c["starter_bytes_copied"]),
                ],
                [
                    "mlx-lm KVCache",
                    f(k["p50_ms"], 3),
                    f(k["p99_ms"], 3),
                    f(k["max_ms"], 1),
                    f(k["mean_ms"], 3),
                    int(k["growths"]),
                    f(k["growth_median_ms"], 2),
                    mb(k["bytes_copied"]),
                    mb(k["peak_memory_bytes"]),
                    mb(k["starter_bytes_copied"]),
                ],
            ],
        ),
        "",
        f"KVCache / Contiguous: p50 {s['p50_ratio']:.2f}x, p99 {s['p99_ratio']:.2f}x, mean {s['mean_ratio']:.2f}x "
        f"(above 1: the contiguous cache is faster). Doubling copies "
        f"{k['bytes_copied'] / max(1, c['bytes_copied']):.0f}x fewer bytes ({int(c['growths'])} growths against "
        f"{int(k['growths'])}). On the tiny model a growth step is lost in the noise (slowest growth step "
        f"{f(c.get('growth_max_ms'), 1)} ms against {f(k.get('growth_max_ms'), 1)} ms; the slowest steps overall, "
        f"{f(c['max_ms'], 1)} and {f(k['max_ms'], 1)} ms, are the machine's noise). "
        + (
            "Peak memory is higher for the contiguous cache: a doubling briefly holds the old and the new buffer. "
            if c["peak_memory_bytes"] > k["peak_memory_bytes"]
            else f"Peak memory is not higher for the contiguous cache here (both end exactly full at {p['tokens'] + 4:,} positions; "
            "between doublings up to half of its buffer is reserved but unused, figure 4). "
        )
        + "Per-token latency is dominated by attention over the growing context on both; on this shared machine "
        "differences of ~10% in p50 between runs of the same cache are common (bench/results/growth.json has each run).",
    ] + _starter_growth(c, k)


def _starter_growth(c, k):
    if "starter_grow_ms" not in c:
        return []
    n = int(c["starter_growth_at"])
    per = 30 * 3 * 64 * 2 * 4
    return [
        "",
        f"At the starter's size the growth step is not noise. One KV write into 30 starter-shaped layers holding "
        f"{n:,} positions (full, so the write grows them; writes alone, no model):",
        "",
        table(
            ["", "growth step ms", "next write ms", "tokens until the next growth", "growth ms per token decoded"],
            [
                [
                    "ContiguousAttentionKVCache (to " + f"{2 * n:,})",
                    f(c["starter_grow_ms"], 0),
                    f(c["starter_next_write_ms"], 1),
                    f"{n:,}",
                    f(c["starter_grow_ms"] / n, 3),
                ],
                [
                    "mlx-lm KVCache (to " + f"{n + 256:,})",
                    f(k["starter_grow_ms"], 0),
                    f(k["starter_next_write_ms"], 1),
                    "256",
                    f(k["starter_grow_ms"] / 256, 3),
                ],
            ],
        ),
        "",
        f"A doubling at {n:,} positions is one pause of {f(c['starter_grow_ms'], 0)} ms (it writes a "
        f"{mb(2 * n * per)} buffer), once per {n:,} tokens; KVCache pauses {f(k['starter_grow_ms'], 0)} ms every 256 "
        f"tokens, {k['starter_grow_ms'] / 256 / max(1e-9, c['starter_grow_ms'] / n):.0f}x more growth time per token.",
    ]


def headline(d, res):
    s = d["summary"]
    return [
        [
            "bytes copied by growth to 16K, KVCache / Contiguous",
            f"{s['kvcache']['bytes_copied'] / max(1, s['contiguous']['bytes_copied']):.0f}",
            f"p99 latency ratio {s['p99_ratio']:.2f}, p50 {s['p50_ratio']:.2f} (above 1: Contiguous faster)",
        ]
    ]


FIGURE = Figure(name="growth", title="KV cache growth", section=section, plot=plot, headline=headline)


if __name__ == "__main__":
    main()
