"""Writes docs/BENCHMARKS.md and docs/bench/*.png from bench/results/*.json.

python -m bench.report        # no measuring: just the document and the plots
"""

import json
import math

from bench.common import DOCS, PLOTS, RESULTS, ROOT

FIGURES = ["decode", "followup", "growth", "memory", "ui", "linux_blas"]
TITLES = {
    "decode": "1. Decode speed and time to first token",
    "followup": "2. Follow-up turns",
    "growth": "3. KV cache growth",
    "memory": "4. Memory across conversations",
    "ui": "5. The window",
    "linux_blas": "6. Linux CPU: BLAS and dequantizing",
}


def load() -> dict:
    out = {}
    for name in FIGURES + ["decode_quantized"]:
        path = RESULTS / f"{name}.json"
        if path.exists():
            out[name] = json.loads(path.read_text())
    return out


# --- formatting ---------------------------------------------------------------------------


def f(x, digits=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:,.{digits}f}"


def mb(n):
    return f"{n / 2**20:,.1f} MiB"


def ratio_word(r, higher_is_better=True):
    """'1.05x (Chinwag faster)' style, from Chinwag / mlx-lm."""
    if r is None or math.isnan(r):
        return "–"
    good = r >= 1 if higher_is_better else r <= 1
    return f"{r:.2f}x" + ("" if abs(r - 1) < 0.005 else (" (Chinwag better)" if good else " (mlx-lm better)"))


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def run_note(d):
    return (
        f"Ran {d['machine']['date']} in {d['seconds']:.0f} s, load average "
        f"{d['machine']['loadavg_at_start'][0]:.1f} at start and {d['loadavg_at_end'][0]:.1f} at end"
        + (" (CHINWAG_BENCH_QUICK: smoke-test sizes, not for quoting)" if d.get("quick") else "")
        + "."
    )


def blas_label(machine) -> str:
    b = machine["blas"]
    if b.get("loaded"):
        return f"system OpenBLAS ({b.get('config', b['library'])}, core {b.get('core', '?')})"
    return f"the reference BLAS bundled with mlx[cpu] ({b['reason']})"


# --- plots --------------------------------------------------------------------------------


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    return plt


COLORS = {"chinwag": "#1f77b4", "mlx_lm": "#ff7f0e", "reprefill": "#7f7f7f", "proposed": "#2ca02c"}


def _model_label(d) -> str:
    m = d.get("model")
    if not m:
        return "quantized" if d["params"].get("quantized") else "as loaded"
    return "4-bit, float32 parameters" if m["quantized"] else f"dequantized to {m['dtype']}"


def plot_decode(d, path, dq=None):
    plt = _plt()
    groups = [(d, _model_label(d))] + ([(dq, _model_label(dq))] if dq else [])
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.8))
    sides = [("chinwag", "Chinwag"), ("mlx_lm", "mlx-lm")]
    width = 0.38
    for ax, key, ylabel in ((a1, "decode_tps", "decode tokens/s"), (a2, "ttft_s", "time to first token, s")):
        for j, (k, label) in enumerate(sides):
            xs = [g + (j - 0.5) * width for g in range(len(groups))]
            ax.bar(
                xs,
                [x["summary"][k][key] for x, _ in groups],
                width,
                color=COLORS[k],
                alpha=0.85,
                label=label if ax is a1 else None,
            )
            for x, (res, _) in zip(xs, groups):
                pts = [r[key] for r in res["runs"][k]]
                ax.scatter([x] * len(pts), pts, color="k", s=8, zorder=3)
        ax.set_xticks(range(len(groups)), [f"starter, {lbl}" for _, lbl in groups], fontsize=8)
        ax.set_ylabel(ylabel + " (median; dots: repetitions)")
    a1.set_title(
        "Decode, " + ", ".join(f"{x['summary']['decode_ratio']:.2f}" for x, _ in groups) + " (Chinwag / mlx-lm)"
    )
    a2.set_title(f"TTFT, {d['summary']['chinwag']['prompt_tokens']}-token prompt")
    a1.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_followup(d, path):
    plt = _plt()
    rows = d["rows"]
    fig, (ax, az) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    for k, label, style in (
        ("reprefill", "full re-prefill every turn", "s--"),
        ("mlx_lm", "mlx-lm LRUPromptCache (server pattern)", "^-"),
        ("chinwag", "Chinwag per-conversation cache", "o-"),
    ):
        rs = rows[k]
        ax.plot([r["prompt_tokens"] for r in rs], [r["ttft_s"] for r in rs], style, color=COLORS[k], label=label)
        if k != "reprefill":
            az.plot([r["prompt_tokens"] for r in rs], [r["ttft_s"] for r in rs], style, color=COLORS[k], label=label)
            for r in rs:
                each = r.get("ttft_each_s", [])
                az.scatter([r["prompt_tokens"]] * len(each), each, color=COLORS[k], s=6, alpha=0.5)
    ax.set_xlabel("history (prompt tokens of the turn)")
    ax.set_ylabel("time to first token, s")
    ax.set_title(f"{len(rows['chinwag'])}-turn chat on the starter model")
    ax.legend(fontsize=8)
    az.set_ylim(0, max(r["ttft_s"] for k in ("chinwag", "mlx_lm") for r in rows[k]) * 1.15)
    az.set_xlabel("history (prompt tokens of the turn)")
    az.set_title("the two caches, zoomed (dots: each pass)")
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


def plot_growth(d, path):
    plt = _plt()
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


def plot_memory(d, path):
    plt = _plt()
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


def plot_ui(d, path):
    plt = _plt()
    s = d["summary"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    cases = list(s["start"])
    for i, c in enumerate(cases):
        a1.bar(i, s["start"][c]["to_first_paint_s"], color=COLORS["chinwag"], alpha=0.8)
        a1.scatter(
            [i] * len(d["starts"][c]), [r["to_first_paint_s"] for r in d["starts"][c]], color="k", s=10, zorder=3
        )
    a1.set_xticks(range(len(cases)), [f"{c}" for c in cases])
    a1.set_ylabel("process start to first paint, s")
    a1.set_title("Cold start")
    labels = ["p50", "p99", "max"]
    keys = ["p50_gap_ms", "p99_gap_ms", "max_gap_ms"]
    modes = [("idle", "#7f7f7f", "idle")]
    if "streaming_first" in s:
        modes.append(("streaming_first", COLORS["mlx_lm"], "first reply after start"))
    modes.append(("streaming", COLORS["chinwag"], "a later reply"))
    width = 0.8 / len(modes)
    for j, (mode, color, label) in enumerate(modes):
        a2.bar(
            [i + (j - (len(modes) - 1) / 2) * width for i in range(3)],
            [s[mode][k] for k in keys],
            width,
            color=color,
            label=label,
        )
    a2.axhline(d["params"]["probe_ms"], color="k", lw=0.8, ls=":", label="timer interval")
    a2.set_xticks(range(3), labels)
    a2.set_ylabel("gap between 5 ms timer ticks, ms")
    a2.set_title(f"Event loop while streaming {int(s['streaming']['tokens'])} tokens")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_blas(d, path):
    plt = _plt()
    s = d["summary"]
    names = list(s)
    fig, axes = plt.subplots(1, 3, figsize=(11, 4))
    short = [n.replace(", ", "\n").replace(" f32", "\nfloat32") for n in names]
    colors = ["#7f7f7f", "#aec7e8", "#ffbb78", COLORS["proposed"]]
    for ax, key, title in (
        (axes[0], "prefill_tps", "prefill tokens/s (log)"),
        (axes[1], "decode_tps", "decode tokens/s"),
        (axes[2], "ttft_s", "time to first token, s (log)"),
    ):
        ax.bar(range(len(names)), [s[n][key] for n in names], color=colors[: len(names)])
        for i, n in enumerate(names):
            ax.scatter([i] * len(d["runs"][n]), [r[key] for r in d["runs"][n]], color="k", s=8, zorder=3)
        ax.set_xticks(range(len(names)), short, fontsize=7)
        ax.set_title(title)
        if "log" in title:
            ax.set_yscale("log")
    fig.suptitle(f"Starter model through the Engine, {s[names[0]]['prompt_tokens']}-token prompt")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


PLOTTERS = {
    "decode": plot_decode,
    "followup": plot_followup,
    "growth": plot_growth,
    "memory": plot_memory,
    "ui": plot_ui,
    "linux_blas": plot_blas,
}


# --- sections -----------------------------------------------------------------------------


def section_decode(d, dq=None):
    groups = [d] + ([dq] if dq else [])
    p = d["params"]
    first = d["summary"]["chinwag"]
    rows = []
    for x in groups:
        s = x["summary"]
        c, m = s["chinwag"], s["mlx_lm"]
        label = _model_label(x)
        rows += [
            [label, "decode tok/s (median)", f(c["decode_tps"]), f(m["decode_tps"]), ratio_word(s["decode_ratio"])],
            [label, "each repetition's decode ratio", "", "", ", ".join(f(r) for r in s["per_rep_decode_ratio"])],
            [
                label,
                "decode tok/s, each side's own counter",
                f(c["own_decode_tps"]),
                f(m["own_decode_tps"]),
                f(c["own_decode_tps"] / m["own_decode_tps"]) + "x",
            ],
            [
                label,
                "time to first token, s",
                f(c["ttft_s"]),
                f(m["ttft_s"]),
                ratio_word(s["ttft_ratio"], higher_is_better=False),
            ],
            [
                label,
                "tokens generated",
                int(c["tokens"]),
                int(m["tokens"]),
                "same ids" if s["same_tokens"] else "ids differ",
            ],
        ]
    out = [
        f"Chinwag's `Engine.chat` against `mlx_lm.stream_generate` on the starter model, in one process. Both "
        f"load it with `engine.local.loading.load`: on the CPU every floating parameter becomes **float32** (float16 "
        f"is ~40x slower in quantized matmuls on the MLX CPU backend and gave wrong answers), and since 6eafe4a, "
        f"with OpenBLAS loaded, the engine also runs a small model **dequantized to float32** "
        f"(`engine/local/blas.py`): that is the first configuration below, what Chinwag runs on this machine. The "
        f"second keeps the weights quantized (4-bit, embeddings 8-bit; `--quantized` sets "
        f"`CHINWAG_CPU_DEQUANTIZE=0`), which is what a machine without OpenBLAS runs. Same chat-templated prompt "
        f"({first['prompt_tokens']} tokens), greedy, {p['tokens']} new tokens, {p['reps']} repetitions, the sides "
        f"alternating. Both are timed from the caller: from the call (template and tokenizing included) to each "
        f"token's arrival; decode tok/s = (tokens − 1) / (last − first arrival).",
        "",
        table(["model", "", "Chinwag", "mlx-lm", "Chinwag / mlx-lm"], rows),
        "",
    ]
    ratios = ", ".join(f"**{x['summary']['decode_ratio']:.2f}** ({_model_label(x)})" for x in groups)
    low = min(x["summary"]["decode_ratio"] for x in groups)
    out.append(
        f"Decode: goal ≥ 1.0, measured {ratios}. "
        + ("Met. " if low >= 1.0 else "Below 1.0 means mlx-lm was faster in this run. ")
        + "The two run the same pipelined loop (the next step is queued before the current token is read), so "
        "parity is what to expect; Chinwag's tokens also cross a thread and an asyncio queue. Run-to-run variation "
        "on this machine is about ±10% (standalone runs of mlx-lm on the quantized model and the same prompt gave "
        "6.1–7.9 tok/s across processes while this was written), so read a ratio between 0.9 and 1.1 as parity."
    )
    out += [
        "",
        "Time to first token: "
        + ", ".join(
            f"Chinwag {f(x['summary']['chinwag']['ttft_s'])} s against mlx-lm {f(x['summary']['mlx_lm']['ttft_s'])} s "
            f"({_model_label(x)})"
            for x in groups
        )
        + "."
        + "".join(
            f" **mlx-lm is faster** ({_model_label(x)}, {x['summary']['ttft_ratio']:.2f}x)"
            + (
                ": the engine prefills in chunks that start at 32 tokens and double while fast, so that Stop "
                "is checked often (this 59-token prompt: 32 + 26 + the last), mlx-lm in one pass (up to 2048), and "
                "dequantized on OpenBLAS a bigger matmul is a faster one."
                if x.get("model") and not x["model"]["quantized"]
                else "."
            )
            for x in groups
            if x["summary"]["ttft_ratio"] > 1.05
        )
        + " History: the first runs of this figure (commit 8fbd0dd, quantized) had Chinwag's TTFT at 1.30x "
        "mlx-lm's (7.28 s against 5.61 s): the engine's prefill took the logits of every prompt position, so the "
        "output layer (49152 × 576, the starter's largest matrix) ran once per prompt token. Patched into the "
        "benchmark (all positions but the last evaluate only the cache, as mlx-lm's `generate_step` does) it gave "
        "5.58 s, and the engine adopted the change in d154c9c.",
    ]
    return out


def section_followup(d):
    rows, s, p = d["rows"], d["summary"], d["params"]
    by_turn = {k: {r["turn"]: r for r in v} for k, v in rows.items()}
    table_rows = []
    for r in rows["chinwag"]:
        t = r["turn"]
        m = by_turn["mlx_lm"].get(t, {})
        rp = by_turn["reprefill"].get(t)
        table_rows.append(
            [
                t,
                r["prompt_tokens"],
                r["prefilled_tokens"],
                f(r["ttft_s"]),
                f"{m.get('prefilled_tokens', '–')}",
                f(m.get("ttft_s")),
                f(rp["ttft_s"]) if rp else "(not run)",
            ]
        )
    ok = s["chinwag_last_over_first"] <= 1.5
    last = s["last_turn"]
    mlx_vs = s["last_turn_mlx_lm_over_chinwag"]
    out = [
        f"A {p['turns']}-turn chat on the starter model ({_model_label(d)}; short questions, greedy replies of "
        f"up to {p['reply_tokens']} tokens), three ways, interleaved turn by turn: **Chinwag** (one Engine "
        f"conversation: its cache holds the history and the previous reply's own token ids are spliced "
        f"back in), **re-prefill** (the Engine with a new conversation id each turn: the whole history "
        f"is prefilled, as `chinwag replay --no-cache` does; "
        + (
            "on every turn"
            if len(p["reprefill_turns"]) == p["turns"]
            else f"on turns {', '.join(map(str, p['reprefill_turns']))} only, since each costs the whole history"
        )
        + "), and **mlx-lm** "
        f"(`mlx_lm.server`'s pattern: `LRUPromptCache.fetch_nearest_cache`, `stream_generate` on the rest, "
        f"`insert_cache` with prompt + reply tokens; it re-tokenizes the reply text it is sent back). "
        f"The chat ran {p.get('passes', 1)} times with fresh conversations"
        + ("" if p.get("reprefill_all_passes", False) else " (re-prefill in the first only)")
        + "; a turn's TTFT is the median over the passes.",
        "",
        table(
            [
                "turn",
                "history tokens",
                "Chinwag prefilled",
                "Chinwag TTFT s",
                "mlx-lm prefilled",
                "mlx-lm TTFT s",
                "re-prefill TTFT s",
            ],
            table_rows,
        ),
        "",
        f"Goal: Chinwag's last-turn TTFT within 1.5x of its first. Measured: first {f(s['chinwag_first_ttft_s'])} s, "
        f"last {f(s['chinwag_last_ttft_s'])} s, **{s['chinwag_last_over_first']:.2f}x** — "
        + ("met." if ok else "**not met**.")
        + f" At the last turn ({last['chinwag']['prompt_tokens']} history tokens) a full re-prefill takes "
        f"{f(last['reprefill']['ttft_s'])} s, {s['last_turn_reprefill_over_chinwag']:.1f}x Chinwag's. "
        + (
            f"mlx-lm's prompt cache reuses as much (it re-tokenizes the reply, which can cost a token or so), and "
            f"**its TTFT is faster at the last turn**: {f(last['mlx_lm']['ttft_s'])} s ({mlx_vs:.2f}x Chinwag's)"
            if mlx_vs < 0.97
            else f"mlx-lm's prompt cache reuses as much (it re-tokenizes the reply, which can cost a token or so); its "
            f"last-turn TTFT is {f(last['mlx_lm']['ttft_s'])} s ({mlx_vs:.2f}x Chinwag's)"
        )
        + (
            f", and over turns 2–{len(rows['chinwag'])} its TTFT is {s['median_followup_ttft_ratio_mlx_lm_over_chinwag']:.2f}x "
            "Chinwag's (median)."
            if "median_followup_ttft_ratio_mlx_lm_over_chinwag" in s
            else "."
        )
        + (
            " Both sides gave the same replies."
            if s.get("same_replies")
            else " The two sides' replies diverged at some turn (re-tokenized reply text), so their histories differ slightly."
        ),
    ]
    return out


def section_growth(d):
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


def section_memory(d):
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
        "figure 6):",
        "",
    ]
    rates = []
    try:
        lb = json.loads((RESULTS / "linux_blas.json").read_text())["summary"]
        for name in ("reference BLAS, quantized", BEST):
            if name in lb:
                rates.append((name, lb[name]["prefill_tps"]))
    except (OSError, ValueError, KeyError):
        pass
    out.append(
        table(
            [
                "tokens",
                "cache size",
                "save (evict) ms",
                "restore ms (read included)",
                "restore ms as the engine counts it",
            ]
            + [f"re-prefill instead, s ({n}: {r:.0f} tok/s)" for n, r in rates],
            [
                [
                    f"{r['tokens']:,}",
                    mb(r["bytes"]),
                    f(r["save_s"] * 1e3, 0),
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


def section_ui(d):
    s, p = d["summary"], d["params"]
    st, idle, first = s["streaming"], s["idle"], s.get("streaming_first")
    starts = s["start"]

    def row(label, x):
        return [
            label,
            f(x["p50_gap_ms"]),
            f(x["p99_gap_ms"]),
            f(x["max_gap_ms"]),
            int(x["stalls_over_50ms"]),
            x.get("max_gap_at", ""),
            f(x["ttft_in_window_s"] * 1e3, 0) if "ttft_in_window_s" in x else "",
        ]

    rows = [row("idle", idle)]
    if first:
        rows.append(row("streaming, first reply after start", first))
    rows.append(row("streaming, a later reply", st))
    out = [
        f"Offscreen Qt (QT_QPA_PLATFORM=offscreen: no display on this machine), a fresh process and a throwaway "
        f"CHINWAG_HOME for every measurement. Cold start: from the parent's clock before it spawns "
        f"`python -m bench.ui_start` (which calls `app.gui.main.run_app` as `chinwag` does) to the main window's first "
        f"Paint event; {p['reps']} repetitions of each case, alternating. Streaming: `MainWindow(store, Engine())` "
        f"on the tiny model, replies of {p['tokens']} tokens sent through the composer (`Composer.submit`), with a "
        f"{p['probe_ms']} ms QTimer (precise) probing the GUI thread; two replies per window, each in a new "
        f"conversation (the first after start, then a later one), {len(d['streams'])} windows; the same probe over "
        f"3 s with the window idle for comparison.",
        "",
        table(
            ["cold start", "to first paint, s (median)", "message widgets built"],
            [[c, f(v["to_first_paint_s"]), v["messages_shown"]] for c, v in starts.items()],
        ),
        "",
        table(
            [
                "event loop",
                "p50 gap ms",
                "p99 gap ms",
                "longest stall (max gap) ms",
                "gaps > 50 ms",
                "longest stall was",
                "send to first token ms",
            ],
            rows,
        ),
        "",
        f"While streaming at {f(st['engine_decode_tps'], 0)} tok/s (engine), {f(st['deltas_per_s'], 0)} text deltas a "
        f"second reached the GUI thread and the streaming message re-rendered {f(st['renders_per_s'], 1)} times a "
        f"second (`ChatView` caps it at 30); the reply was {int(st['reply_chars']):,} characters. The longest stall "
        f"of the event loop during a reply was {f(st['max_gap_ms'], 1)} ms ({f(idle['max_gap_ms'], 1)} ms idle).",
    ]
    if first:
        out[-1] += (
            f" The first reply after start is different: one stall of {f(first['max_gap_ms'], 0)} ms, "
            f"{first.get('max_gap_at', '')}. The send itself (`Composer.submit`: store writes, widgets, the engine "
            f"call) took {f(first.get('submit_call_ms'), 0)} ms on the GUI thread, against "
            f"{f(st.get('submit_call_ms'), 0)} ms for a later reply; the rest was not isolated here (likely "
            "candidates: first-use work of the engine thread's first turn, such as the chat template's first "
            "rendering and lazy imports, which holds the GIL)."
        )
    out[-1] += (
        f" A 50-message conversation opens on its latest {starts.get('50 messages', {}).get('messages_shown', '?')} "
        f"messages and adds "
        f"{f((starts.get('50 messages', {}).get('to_first_paint_s', float('nan')) - starts.get('empty', {}).get('to_first_paint_s', float('nan'))) * 1e3, 0)} ms "
        "to the first paint."
    )
    return out


BEST = "OpenBLAS, dequantized f32"


def section_blas(d):
    s = d["summary"]
    names = list(s)
    base = s[names[0]]
    m = d["machine"]
    rows = [
        [
            n,
            s[n]["blas_core"],
            f(s[n]["matmul_1024_ms"], 1),
            f(s[n]["prefill_tps"], 1),
            f(s[n]["decode_tps"], 2),
            f(s[n]["ttft_s"]),
            f(s[n]["load_s"], 1),
            mb(s[n]["peak_rss_bytes"]),
            "yes" if s[n]["same_tokens_as_reference"] else "no",
        ]
        for n in names
    ]
    core = m["blas"].get("OPENBLAS_CORETYPE") or "not set"
    out = [
        f"The mlx[cpu] wheel links the reference (netlib) BLAS it bundles (`mlx_cpu.libs/libblas-*.so.3.10.0`); "
        f"MLX calls `cblas_sgemm` through the dynamic linker, so an OpenBLAS loaded with RTLD_GLOBAL before mlx "
        f"is imported takes over (`engine/local/blas.py`, `preload_openblas()`). Up to four configurations, each in its "
        f"own subprocess, alternating, {d['params']['reps']} repetitions: the BLAS (`CHINWAG_NO_OPENBLAS=1` or "
        f"not), and the starter model kept quantized (float32 parameters) or dequantized to float32 "
        f"(`CHINWAG_CPU_DEQUANTIZE=0`/`1`): the engine's own switches. Since 6eafe4a the engine picks the last "
        f"row by itself when OpenBLAS is loaded, and the first without it. The Engine end to end: load, a warm-up turn, then one "
        f"turn with a {base['prompt_tokens']}-token prompt and {d['params']['tokens']} greedy tokens; the "
        f"engine's own prefill and decode rates (TurnStats).",
        "",
        table(
            [
                "configuration",
                "BLAS core",
                "1024² f32 matmul ms",
                "prefill tok/s",
                "decode tok/s",
                "TTFT s",
                "load s",
                "peak RSS",
                "same tokens",
            ],
            rows,
        ),
        "",
    ]
    deq = s.get("reference BLAS, dequantized f32")
    if BEST not in s:
        out.append(
            "**No system OpenBLAS was found on this machine**, so only the reference BLAS was measured. "
            "Install it (Debian/Ubuntu: `apt-get install libopenblas0-pthread`) and rerun "
            "`python -m bench.figures.linux_blas`."
        )
    else:
        best, ob = s[BEST], s.get("OpenBLAS, quantized")
        out.append(
            (
                f"OpenBLAS alone changes little for the quantized model: quantized matmuls do not go through BLAS "
                f"(prefill {ob['prefill_speedup']:.2f}x, decode {ob['decode_speedup']:.2f}x). "
                if ob
                else ""
            )
            + (
                f"Dequantized without OpenBLAS changes little too (prefill {deq['prefill_speedup']:.2f}x, decode "
                f"{deq['decode_speedup']:.2f}x): the reference BLAS is as slow as the quantized kernels. "
                if deq
                else ""
            )
            + f"**OpenBLAS with the model dequantized to float32: prefill {best['prefill_speedup']:.1f}x, decode "
            f"{best['decode_speedup']:.2f}x, time to first token {best['ttft_speedup']:.1f}x faster** "
            f"({f(base['ttft_s'])} s → {f(best['ttft_s'])} s), at {mb(best['peak_rss_bytes'] - base['peak_rss_bytes'])} "
            f"more memory (the 135M parameters in float32). The 1024² matmul: {base['matmul_1024_ms']:.0f} ms → "
            f"{best['matmul_1024_ms']:.0f} ms ({best['matmul_speedup']:.0f}x). "
            + (
                "The generated tokens were the same in all configurations."
                if all(s[n]["same_tokens_as_reference"] for n in names)
                else "The generated tokens differed between configurations: see the table."
            )
        )
    out += [
        "",
        f"OpenBLAS here: {m['blas'].get('config', 'not loaded')}; OPENBLAS_CORETYPE: {core}; "
        f"OPENBLAS_L2_SIZE: {m['blas'].get('OPENBLAS_L2_SIZE') or 'not set'} (recorded from the environment, never "
        f"changed). OpenBLAS is not a Python dependency: on Debian/Ubuntu `apt-get install libopenblas0-pthread` "
        f"(Fedora: `openblas-threads`). A machine without it (CI, a fresh clone) keeps the bundled BLAS and this "
        f"figure's first row; the machine table at the top says which BLAS a run had.",
    ]
    return out


SECTIONS = {
    "decode": section_decode,
    "followup": section_followup,
    "growth": section_growth,
    "memory": section_memory,
    "ui": section_ui,
    "linux_blas": section_blas,
}


def headline(res) -> list:
    rows = []
    for key in ("decode", "decode_quantized"):
        if key not in res:
            continue
        s, label = res[key]["summary"], _model_label(res[key])
        rows.append(
            [
                "1",
                f"decode tok/s, Chinwag / mlx-lm (goal ≥ 1.0), starter {label}",
                f"**{s['decode_ratio']:.2f}**",
                f"{f(s['chinwag']['decode_tps'])} vs {f(s['mlx_lm']['decode_tps'])} tok/s",
            ]
        )
        rows.append(
            [
                "1",
                f"time to first token, Chinwag / mlx-lm, starter {label}",
                f"{s['ttft_ratio']:.2f}",
                f"{f(s['chinwag']['ttft_s'])} vs {f(s['mlx_lm']['ttft_s'])} s (mlx-lm better above 1)",
            ]
        )
    if "followup" in res:
        s = res["followup"]["summary"]
        rows.append(
            [
                "2",
                "Chinwag last-turn TTFT / first-turn (goal ≤ 1.5)",
                f"**{s['chinwag_last_over_first']:.2f}**",
                f"{f(s['chinwag_first_ttft_s'])} → {f(s['chinwag_last_ttft_s'])} s",
            ]
        )
        rows.append(
            [
                "2",
                "last turn: re-prefill / Chinwag",
                f"{s['last_turn_reprefill_over_chinwag']:.1f}",
                f"{s['last_turn']['chinwag']['prompt_tokens']} history tokens",
            ]
        )
        rows.append(
            [
                "2",
                "last turn: mlx-lm prompt cache / Chinwag",
                f"{s['last_turn_mlx_lm_over_chinwag']:.2f}",
                "below 1: mlx-lm faster",
            ]
        )
    if "growth" in res:
        s = res["growth"]["summary"]
        rows.append(
            [
                "3",
                "bytes copied by growth to 16K, KVCache / Contiguous",
                f"{s['kvcache']['bytes_copied'] / max(1, s['contiguous']['bytes_copied']):.0f}",
                f"p99 latency ratio {s['p99_ratio']:.2f}, p50 {s['p50_ratio']:.2f} (above 1: Contiguous faster)",
            ]
        )
    if "memory" in res:
        s = res["memory"]["summary"]
        rows.append(
            [
                "4",
                "KV bytes reserved / bytes needed",
                f"{s['bytes_over_exact']:.2f}",
                f"{s['evictions']} evictions, {s['restores']} restores under the budget",
            ]
        )
    if "ui" in res:
        s = res["ui"]["summary"]
        first = s.get("streaming_first")
        rows.append(
            [
                "5",
                "longest event-loop stall while streaming, ms",
                f(s["streaming"]["max_gap_ms"], 1),
                f"{f(s['streaming']['renders_per_s'], 0)} renders/s at {f(s['streaming']['engine_decode_tps'], 0)} tok/s"
                + (
                    f"; first reply after start: one {f(first['max_gap_ms'], 0)} ms stall before its first token"
                    if first
                    else ""
                ),
            ]
        )
        rows.append(
            [
                "5",
                "cold start to first paint, s (empty / 50 messages)",
                " / ".join(f(v["to_first_paint_s"]) for v in s["start"].values()),
                "",
            ]
        )
    if "linux_blas" in res:
        s = res["linux_blas"]["summary"]
        names = list(s)
        if BEST in s:
            b = s[BEST]
            rows.append(
                [
                    "6",
                    "OpenBLAS + dequantized f32 vs reference BLAS + quantized: prefill / decode / TTFT",
                    f"**{b['prefill_speedup']:.1f}x / {b['decode_speedup']:.2f}x / {b['ttft_speedup']:.1f}x**",
                    f"{f(s[names[0]]['prefill_tps'], 1)} → {f(b['prefill_tps'], 1)} prefill tok/s",
                ]
            )
        else:
            rows.append(["6", "OpenBLAS + dequantized f32", "not measured", "no system OpenBLAS on this machine"])
    return ["| fig. | measure | result | detail |", "|---|---|---|---|"] + ["| " + " | ".join(r) + " |" for r in rows]


def machine_table(res) -> list:
    any_result = next(iter(res.values()))
    m = any_result["machine"]
    rows = [
        ["CPU", f"{m['cpu']} ({m['cpu_flags']})"],
        ["cores", f"{m['cores']} ({m['usable_cores']} usable), shared with other engineers' jobs"],
        ["memory", f"{m['ram_gib']} GiB"],
        ["OS", m["os"]],
        ["Python / MLX / mlx-lm / PySide6", f"{m['python']} / {m['mlx']} / {m['mlx_lm']} / {m['pyside6']}"],
        ["BLAS used by figures 1–5", blas_label(m)],
        [
            "OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE",
            f"{m['blas'].get('OPENBLAS_CORETYPE') or 'not set'} / {m['blas'].get('OPENBLAS_L2_SIZE') or 'not set'}",
        ],
        ["commit measured", m["commit"]],
    ]
    return ["| | |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]


def main():
    res = load()
    PLOTS.mkdir(parents=True, exist_ok=True)
    total = sum(d["seconds"] for d in res.values())
    lines = [
        "# Chinwag benchmarks",
        "",
        "Written by `make bench` (`python -m bench.run_all`), which runs every script in `bench/` and then "
        "`python -m bench.report`. Each figure's own command re-measures it alone and rewrites this file; "
        "the raw numbers are in `bench/results/*.json`. "
        + (f"The last full run took {total / 60:.0f} minutes." if res else ""),
        "",
        "This machine is shared and noisy (2 cores, other engineers' test suites running at the same time). "
        "So every comparison runs both sides in the same run, interleaved, with repetitions where affordable, "
        "and reports medians and the ratio; the load average at the start and end of each figure is given. "
        "Sizes were cut to keep `make bench` near 20 minutes, and each section says what it ran.",
        "",
        "## The machine",
        "",
    ]
    if not res:
        lines.append("No results yet: run `make bench`.")
    else:
        lines += machine_table(res)
        if next(iter(res.values()))["machine"]["blas"].get("loaded"):
            lines += [
                "",
                "The benchmark processes preload OpenBLAS (`engine/local/blas.py`) before importing mlx, as the "
                "Engine itself does since 6eafe4a, so both sides of every comparison run with the same BLAS; "
                "and with OpenBLAS loaded `engine.local.loading.load` runs the starter dequantized to float32 "
                "(figure 6 compares the four combinations).",
            ]
        lines += ["", "## Headline numbers", ""] + headline(res)
    for name in FIGURES:
        lines += ["", f"## {TITLES[name]}", ""]
        d = res.get(name)
        if d is None:
            lines.append(f"Not measured yet: `python -m bench.figures.{name}`.")
            continue
        extra = (res.get("decode_quantized"),) if name == "decode" else ()
        try:
            PLOTTERS[name](d, PLOTS / f"{name}.png", *extra)
            lines += [f"![{TITLES[name]}](bench/{name}.png)", ""]
        except Exception as e:  # a broken plot must not lose the tables
            lines += [f"(plot failed: {type(e).__name__}: {e})", ""]
        lines += [f"Reproduce: `{d['command']}`. {run_note(d)}"]
        if extra and extra[0]:
            lines[-1] += f" Quantized: `{extra[0]['command']}`. {run_note(extra[0])}"
        lines.append("")
        try:
            lines += SECTIONS[name](d, *extra)
        except Exception as e:
            lines.append(f"(section failed: {type(e).__name__}: {e})")
    lines += ["", "## Recommendations for the engine", ""] + RECOMMENDATIONS
    (DOCS / "BENCHMARKS.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {(DOCS / 'BENCHMARKS.md').relative_to(ROOT)} and {sum(n in res for n in FIGURES)} plots", flush=True)


RECOMMENDATIONS = [
    "1. Done (6eafe4a): the Engine preloads OpenBLAS (`engine.local.blas.preload_openblas()` in "
    "`Engine._ensure_thread`, before the engine thread imports mlx) and `engine.local.loading.load` runs small "
    "quantized models dequantized to float32 when it is loaded (`CHINWAG_NO_OPENBLAS=1`, "
    "`CHINWAG_CPU_DEQUANTIZE=0/1`), and the README's Linux section says to install OpenBLAS (25f4e7f). "
    "`make setup` does not install it (it needs root), so CI and fresh machines run the quantized path, "
    "figure 6's first row, unless it is installed.",
    "2. Done: prefill chunks start at 32 tokens and double (up to 512) while a chunk takes under "
    "0.25 s (`engine/local/generation.py`), so Stop stays prompt at ~10 tok/s and large chunks run where prefill is "
    "fast. Before, a fixed 32-token chunk cost the dequantized starter ~1/3 of its prefill speed.",
    "3. Done: `ContiguousAttentionKVCache.from_state(state, max_seq_len)` allocates `max_seq_len` positions "
    "directly instead of doubling from the positions held, and cache restores are timed including the read.",
    "4. Done: `Engine.memory_stats()` returns a `MemoryReport` (tokens held, positions and bytes reserved, "
    "evictions, restores and their seconds), which figure 4 reads. Still open: evictions are saved synchronously "
    "on the engine thread after a turn: for a starter-sized cache of 8K tokens that is ~0.5–0.9 s before the "
    "next turn can start.",
    "5. **The first reply after start** stalls the GUI thread once for ~70 ms before its first token (figure 5); "
    "later replies do not. Worth a look by whoever owns the window (warming the chat template on the engine "
    "thread after the model loads is a cheap candidate).",
    "6. Done (d154c9c): the prefill change that closed figure 1's TTFT gap.",
]


# --- figure 7: speculative decoding (bench/figures/speculative.py) ---------------------------------

SPEC_CASES = {
    "a_code": "(a) rewrite code",
    "b_summary": "(b) summarise",
    "c_chat": "(c) free chat",
    "d_draft_copy": "(d) drafts by\na copy",
    "d_draft_other": "(d) drafts by\nother weights",
}
SPEC_SIDES = [
    ("mlx_lm", "mlx-lm", COLORS["mlx_lm"]),
    ("off", "Chinwag, speculation off", "#aec7e8"),
    ("on", "Chinwag, speculation on", COLORS["chinwag"]),
]


def plot_speculative(d, path):
    plt = _plt()
    models = list(d["results"])
    widths = [len(d["results"][m]) for m in models]
    fig, axes = plt.subplots(
        1, len(models), figsize=(2 + 1.9 * sum(widths), 4.2), squeeze=False, gridspec_kw={"width_ratios": widths}
    )
    width = 0.27
    for ax, model in zip(axes[0], models):
        res = d["results"][model]
        cases = list(res)
        for j, (side, label, color) in enumerate(SPEC_SIDES):
            xs = [i + (j - 1) * width for i in range(len(cases))]
            ax.bar(xs, [res[c]["decode_tps"][side] for c in cases], width, color=color, label=label)
            for x, c in zip(xs, cases):
                pts = [r["decode_tps"] for r in res[c]["runs"][side]]
                ax.scatter([x] * len(pts), pts, color="k", s=6, zorder=3)
        ax.set_xticks(
            range(len(cases)),
            [f"{SPEC_CASES.get(c, c)}\n{res[c]['on_over_mlx_lm']:.2f}x mlx-lm" for c in cases],
            fontsize=8,
        )
        ax.set_ylabel("decode tokens/s (median; dots: repetitions)")
        ax.set_title(f"{model} model")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --- figure 8: models served elsewhere (bench/figures/remote.py) ----------------------------------


def plot_remote(d, path):
    plt = _plt()
    rows = d["rows"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for k, label, style, color in (
        ("careless", "server, history re-rendered each turn (careless client)", "s--", COLORS["reprefill"]),
        ("identical", "server, history byte-identical (Chinwag)", "o-", COLORS["chinwag"]),
        ("local", "Chinwag's local engine", "^-", COLORS["proposed"]),
    ):
        rs = rows[k]
        ax.plot([r["turn"] for r in rs], [r["ttft_s"] for r in rs], style, color=color, label=label)
    ax.set_xlabel("turn")
    ax.set_ylabel("time to first token, s")
    ax.set_title(f"{len(rows['identical'])}-turn chat through mlx_lm.server on loopback")
    ax.legend(fontsize=8)


# --- 7. Long chats past the window (bench/figures/longchat.py) --------------------------------------


def plot_longchat(d, path):
    plt = _plt()
    chat = d.get("chat")
    fig, axes = plt.subplots(1, 3 if chat else 2, figsize=(14 if chat else 10, 4))
    ax = axes[0]
    for lw, pol in d["policy"].items():
        rows, total, cumulative = pol["rows"], 0, []
        for r in rows:
            total += r["prefilled"]
            cumulative.append(total)
        ax.plot(
            [r["turn"] for r in rows],
            cumulative,
            lw=1.2,
            label=f"low-water {float(lw):.2f}" + (" (exact fit, before)" if float(lw) == 1.0 else ""),
        )
    ax.set_yscale("log")
    ax.set_xlabel("turn")
    ax.set_ylabel("tokens prefilled so far (log)")
    ax.set_title(f"policy alone: {d['params']['policy_turns']} turns, cap {d['params']['policy_cap']}")
    ax.legend(fontsize=7)
    if chat:
        names = {
            "chinwag": "Chinwag (default low-water)",
            "exact_fit": "exact fit (before)",
            "mlx_lm": "mlx-lm RotatingKVCache",
        }
        colors = {"chinwag": COLORS["chinwag"], "exact_fit": COLORS["reprefill"], "mlx_lm": COLORS["mlx_lm"]}
        ax = axes[1]
        for side, rows in chat.items():
            ax.plot([r["turn"] for r in rows], [r["ttft_s"] for r in rows], lw=1, color=colors[side], label=names[side])
        ax.set_xlabel("turn")
        ax.set_ylabel("time to first token, s")
        ax.set_title(f"starter model: {d['params']['turns']} turns, cap {d['params']['cap']}")
        ax.legend(fontsize=7)
    ax = axes[-1]
    r = d["restart"]
    ax.bar([0, 1], [r["saved_ttft_s"], r["none_ttft_s"]], color=[COLORS["chinwag"], COLORS["reprefill"]])
    ax.set_xticks([0, 1], ["saved cache", "no saved cache"])
    ax.set_ylabel("first follow-up TTFT after a restart, s")
    ax.set_title(f"restart, a {r['chat_tokens']}-token chat")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section_speculative(d):
    rows = []
    for model, res in d["results"].items():
        for case, r in res.items():
            t = r["decode_tps"]
            rows.append(
                [
                    model,
                    SPEC_CASES.get(case, case).replace("\n", " "),
                    r["prompt_tokens"],
                    r["tokens"],
                    f(t["mlx_lm"]),
                    f(t["off"]),
                    f(t["on"]),
                    f"**{r['on_over_mlx_lm']:.2f}x**",
                    f"{r['on_over_off']:.2f}x",
                    f"{r['accepted']}/{r['drafted']} ({f(100 * r['acceptance'], 0)}%)" if r["drafted"] else "0/0",
                    "yes" if r["same_ids"] else "**no**",
                ]
            )
    spreads = []
    for model, res in d["results"].items():
        tps = [x["decode_tps"] for r in res.values() for rs in r["runs"].values() for x in rs]
        # The same side and case from one repetition to the next: how much the machine's load moved.
        worst = max(
            max(x["decode_tps"] for x in rs) / min(x["decode_tps"] for x in rs)
            for r in res.values()
            for rs in r["runs"].values()
        )
        spreads.append(f"{model}: up to {worst:.1f}x between repetitions of one side and case" if tps else "")
    goals = []
    starter = d["results"].get("starter", {})
    for case, goal in (("a_code", 1.5), ("b_summary", 1.5), ("c_chat", 0.97)):
        if case in starter:
            r = starter[case]["on_over_mlx_lm"]
            goals.append(
                f"{SPEC_CASES[case]} goal ≥ {goal}x mlx-lm: measured **{r:.2f}x**, "
                + ("met" if r >= goal else "not met")
            )
    return [
        f"Prompt-lookup speculative decoding (`engine/local/speculative.py`): drafts copied from the tokens that followed "
        f"the latest earlier match of the conversation's last 3-, 2- or 1-gram, verified in one forward pass, "
        f"rejected positions trimmed from the cache; the draft length adapts to the acceptance rate and drops to 0 "
        f"while drafts keep failing. Greedy, {d['params']['reps']} repetitions, the three sides rotating; decode "
        f"tok/s from the caller, (tokens − 1) / (last − first token). The tiny model has random weights and copies "
        f"nothing from its prompt: it shows what drafting costs when it never pays off. (d) drafts with a draft "
        f"model instead, on the free-chat prompt: no small/large pair of one family is available offline, so only "
        f"the tiny model runs it, for the mechanics, drafted by a copy of itself (every draft right) and by a tiny "
        f"model with the same tokenizer and other weights (drafts nearly always wrong; a failing draft model pauses "
        f"with a doubling back-off). Speculation on: the switch's value, not the backend's default.",
        "",
        table(
            [
                "model",
                "case",
                "prompt",
                "tokens",
                "mlx-lm tok/s",
                "off tok/s",
                "on tok/s",
                "on / mlx-lm",
                "on / off",
                "accepted / drafted",
                "same ids",
            ],
            rows,
        ),
        "",
        "Starter model: " + "; ".join(goals) + "." if goals else "",
        "",
        "Noise (the dots): " + "; ".join(spreads) + ", as other jobs start and stop. Starter, on / mlx-lm in "
        "each repetition: "
        + "; ".join(
            f"{SPEC_CASES.get(c, c)} " + ", ".join(f(x) for x in r["per_rep_on_over_mlx_lm"])
            for c, r in starter.items()
        )
        + ". The tiny model, at hundreds of tokens/s, "
        "is timed in milliseconds per reply on a machine shared with other test runs: its ratios are noise and "
        "only its same-ids column counts.",
    ]


FIGURES.append("speculative")
TITLES["speculative"] = "7. Speculative decoding from the conversation"
PLOTTERS["speculative"] = plot_speculative
SECTIONS["speculative"] = section_speculative


def section_remote(d):
    rows, s, p = d["rows"], d["summary"], d["params"]
    table_rows = []
    for i, r in enumerate(rows["identical"]):
        c, loc = rows["careless"][i], rows["local"][i]
        table_rows.append(
            [
                r["turn"],
                f"{r['reused_tokens']} / {r['prompt_tokens']}",
                f(r["ttft_s"]),
                f"{c['reused_tokens']} / {c['prompt_tokens']}",
                f(c["ttft_s"]),
                f(loc["ttft_s"]),
            ]
        )
    last = s["last_turn"]
    return [
        f"A {p['turns']}-turn chat (greedy replies of up to {p['reply_tokens']} tokens) through `mlx_lm.server` on "
        "127.0.0.1 serving a float32 copy of the starter (the weights Chinwag runs on the CPU, the same BLAS), "
        "three sides interleaved turn by turn: **identical** (Chinwag's remote backend: the full history sent "
        "byte-identical, each reply exactly as received), **careless** (the same client, but the history "
        "re-rendered each request: the time of the request in the system prompt, replies stored normalized; the "
        "server's prompt cache misses from the first changed byte), and **local** (Chinwag's own engine on the "
        "same weights). Reused tokens are what the server reported (`usage.prompt_tokens_details.cached_tokens`).",
        "",
        table(
            [
                "turn",
                "identical reused / prompt",
                "identical TTFT s",
                "careless reused / prompt",
                "careless TTFT s",
                "local TTFT s",
            ],
            table_rows,
        ),
        "",
        f"At the last turn the byte-identical history had {last['identical']['reused_tokens']} of "
        f"{last['identical']['prompt_tokens']} prompt tokens served from the server's cache "
        f"({s['identical_reused_share_last']:.0%}), the careless client {s['careless_reused_share_last']:.0%}; its "
        f"TTFT was **{s['last_turn_careless_over_identical']:.2f}x** the byte-identical one "
        f"(median over the follow-up turns {s['median_followup_careless_over_identical']:.2f}x). Through the server "
        f"the last turn's TTFT was {s['last_turn_identical_over_local']:.2f}x the local engine's (HTTP, JSON and "
        "the server's own scheduling on top of the same prefill).",
    ]


FIGURES.append("remote")
TITLES["remote"] = "8. Models served elsewhere: mlx_lm.server on loopback"
PLOTTERS["remote"] = plot_remote
SECTIONS["remote"] = section_remote


def section_longchat(d):
    p = d["params"]
    out = [
        f"The window policy alone first (the starter's tokenizer, fixed {p['reply_tokens']}-token replies, "
        f"{p['policy_turns']} short turns, context cap {p['policy_cap']}): prefilled tokens per turn averaged "
        "from the first slide on, over a turn's own new tokens (the median prefill before the limit). "
        "Low-water 1.0 is the previous exact-fit policy.",
        "",
    ]
    out += [
        table(
            [
                "low-water",
                "first slide at turn",
                "prefilled / turn past the limit",
                "× new tokens",
                "mean prompt past the limit",
            ],
            [
                [
                    f"{float(lw):.2f}",
                    str(x["first_slide"]),
                    f(x["mean_prefilled_past_limit"], 1),
                    f(x["ratio"]),
                    f(x["mean_prompt_past_limit"], 0),
                ]
                for lw, x in d["policy"].items()
            ],
        )
    ]
    out += ["", f"Default: `DEFAULT_LOW_WATER` = {p['default_low_water']:.2f} (engine/types.py).", ""]
    if d.get("chat_summary"):
        out += [
            f"The starter model, greedy, {p['turns']} turns, context cap {p['cap']}, replies of up to "
            f"{p['reply_tokens']} tokens, the three sides interleaved turn by turn, no pause between turns "
            "(the worst case: no idle-time work). Late = turns "
            f"{'–'.join(map(str, next(iter(d['chat_summary'].values()))['late_turns']))}.",
            "",
        ]
        names = {"chinwag": "Chinwag", "exact_fit": "exact fit (before)", "mlx_lm": "mlx-lm RotatingKVCache"}
        out += [
            table(
                ["side", "median TTFT turns 2–10, s", "median TTFT late, s", "late / early", "mean prefilled late"],
                [
                    [
                        names[k],
                        f(v["early_ttft_s"]),
                        f(v["late_ttft_s"]),
                        f(v["late_over_early"]),
                        f(v["mean_prefilled_late"], 1),
                    ]
                    for k, v in d["chat_summary"].items()
                ],
            )
        ]
        out += [
            "",
            "mlx-lm's rotating cache never re-prefills, but past the limit it overwrites the oldest "
            "positions: its replies no longer equal a fresh computation of any prompt. Chinwag's stay exact.",
            "",
        ]
    if not d.get("chat_summary"):
        out += [
            "The starter-model chat (Chinwag, exact fit and mlx-lm's RotatingKVCache, TTFT per turn) was not "
            "run at this size (`--skip-chat`): 300 turns with the exact-fit side re-prefilling ~1,000 tokens a "
            "turn take hours on this shared CPU. Run `python -m bench.figures.longchat` for it.",
            "",
        ]
    out += [
        "`plan_window` (the fit) on the starter's tokenizer: the first call for a chat (nothing remembered) "
        "and a steady-state turn.",
        "",
    ]
    out += [
        table(
            ["turns", "first call, ms", "a turn, ms"],
            [[str(r["turns"]), f(r["cold_ms"], 1), f(r["turn_ms"], 2)] for r in d["fit"]],
        )
    ]
    r = d["restart"]
    out += [
        "",
        f"Restart: a {r['chat_tokens']}-token chat, `Engine.close()`, a new `Engine`, its first follow-up: "
        f"{f(r['saved_ttft_s'])} s with the saved cache, {f(r['none_ttft_s'])} s without "
        f"({f(r['speedup'], 1)}× faster).",
    ]
    return out


FIGURES.append("longchat")
TITLES["longchat"], PLOTTERS["longchat"], SECTIONS["longchat"] = (
    "9. Long chats past the window",
    plot_longchat,
    section_longchat,
)


# --- Prefill while typing (bench/figures/typing_prefill.py) -----------------------------------


def plot_typing_prefill(d, path):
    plt = _plt()
    rows = d["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    xs = list(range(len(rows)))
    width = 0.38
    ax.bar(
        [x - width / 2 for x in xs],
        [r["cold_ttft_s"] for r in rows],
        width,
        color=COLORS["reprefill"],
        label="Enter with nothing read ahead",
    )
    ax.bar(
        [x + width / 2 for x in xs],
        [r["ahead_ttft_s"] for r in rows],
        width,
        color=COLORS["chinwag"],
        label="read while typing (engine.prefill)",
    )
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['speedup']:.0f}x", (x + width / 2, r["ahead_ttft_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [f"{r['message_tokens']:,}-token message" for r in rows])
    ax.set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("Enter to first token, s (log)")
    ax.set_title(f"Prefill while typing, starter model ({_model_label(d)})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section_typing_prefill(d):
    rows, s, p = d["rows"], d["summary"], d["params"]
    table_rows = [
        [
            f"{r['message_tokens']:,}",
            f"{r['prompt_tokens']:,}",
            f(r["cold_ttft_s"], 3),
            f(r["ahead_ttft_s"], 3),
            f"**{r['speedup']:.1f}x**",
            f"{r['cold_prefilled_tokens']:.0f} / {r['ahead_prefilled_tokens']:.0f}",
            f(r["read_ahead_s"]),
            "yes" if r["identical_replies"] else "**no**",
        ]
        for r in rows
    ]
    goal = s.get("goal_speedup")
    return [
        f"A chat on the starter model ({_model_label(d)}): a system prompt and one earlier exchange, cached; then a "
        f"new user message (a paste of plain notes and a question). **Read ahead**: the window's typing pause "
        f"calls `engine.prefill(conv, messages + [draft])`, which reads the draft in the background (not timed: "
        f"the user is still typing), then Enter sends it. **Cold**: Enter with nothing read ahead, the previous "
        f"behaviour. Timed from the `chat` call to the first token; greedy replies of {p['reply_tokens']} tokens; "
        f"{p['reps']} repetitions in fresh conversations, the two sides interleaved; medians.",
        "",
        table(
            [
                "message tokens",
                "prompt tokens",
                "cold s",
                "read ahead s",
                "speed-up",
                "prefilled on Enter (cold / ahead)",
                "read-ahead time s",
                "identical replies",
            ],
            table_rows,
        ),
        "",
        f"Goal: at least {s['goal_ratio']:.0f}x at {s['goal_size']} tokens. Measured: "
        + (f"**{goal:.1f}x** — " + ("met." if s["goal_met"] else "**not met**.") if goal else "not run at that size.")
        + (
            " Replies were identical with and without reading ahead."
            if s["identical_replies"]
            else " **Some replies differed.**"
        )
        + " With the draft read ahead, Enter computes one token (the prompt's last, whose logits start the reply) "
        "and then decodes: the time left is one forward pass and the sampling of the first token.",
    ]


FIGURES.append("typing_prefill")
TITLES["typing_prefill"] = f"{len(FIGURES)}. Prefill while typing"
PLOTTERS["typing_prefill"] = plot_typing_prefill
SECTIONS["typing_prefill"] = section_typing_prefill


def plot_highlight(d, path):
    plt = _plt()
    s = d["summary"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for mode, color, label in (
        ("off", COLORS["reprefill"], "highlighting off"),
        ("on", COLORS["chinwag"], "highlighting on (Chinwag)"),
    ):
        xs = [n for n, _ in s[mode]["by_length"]]
        ax.plot(xs, [ms for _, ms in s[mode]["by_length"]], ".", ms=3, color=color, label=label)
    ax.axhline(s["budget_ms"], color="k", lw=0.8, ls=":", label=f"render interval ({d['params']['render_hz']} Hz)")
    ax.set_xlabel("characters of code in the streaming block")
    ax.set_ylabel("one re-render of the message, ms")
    ax.set_title("A code block streaming in")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section_highlight(d):
    s, p = d["summary"], d["params"]
    on, off = s["on"], s["off"]
    return [
        f"`MarkdownView` (offscreen Qt) showing a reply that is one Python code block growing by {p['step']} "
        f"characters per re-render up to {p['chars']:,} characters ({on['renders']} re-renders), each re-render "
        f"(`set_text` plus Qt's pending events: layout and paint) timed; highlighting on (as shipped: the live block "
        f"is re-lexed at most once per re-render and only after 10x its last highlight's cost has passed) against "
        f"off (`CodeBlock._highlight` a no-op), {p['reps']} repetitions of each, A B B A. Then the fence closes: "
        f"one complete highlight.",
        "",
        table(
            ["", "p50 ms", "p95 ms", "max ms", "highlights of the live block", "closing the fence, ms"],
            [
                [
                    "highlighting off",
                    f(off["p50_ms"]),
                    f(off["p95_ms"]),
                    f(off["max_ms"], 1),
                    int(off["highlights"]),
                    f(off["final_ms"], 1),
                ],
                [
                    "highlighting on",
                    f(on["p50_ms"]),
                    f(on["p95_ms"]),
                    f(on["max_ms"], 1),
                    int(on["highlights"]),
                    f(on["final_ms"], 1),
                ],
            ],
        ),
        "",
        f"On / off: p50 {s['p50_ratio']:.2f}x, p95 {s['p95_ratio']:.2f}x. The render interval is "
        f"{f(s['budget_ms'], 1)} ms ({p['render_hz']} Hz): a re-render "
        + ("stays inside it at p95" if on["p95_ms"] <= s["budget_ms"] else "**exceeds it at p95**")
        + " with highlighting on"
        + (
            ""
            if on["p95_ms"] <= s["budget_ms"] or off["p95_ms"] <= s["budget_ms"]
            else f", as it does with highlighting off ({f(off['p95_ms'], 0)} ms): see the load average"
        )
        + ". A profile of one highlighted run (8,000 characters) put ~70% of the time in Qt's layout and paint "
        f"and ~11% in Pygments. The live block was re-coloured {int(on['highlights'])} times in "
        f"{on['renders']} re-renders. Closing the fence colours the whole block once: "
        f"{f(on['final_ms'], 0)} ms at {p['chars']:,} characters, a single pause at the end of the block "
        "(Pygments lexes the whole block; on Apple Silicon expect several times less).",
    ]


FIGURES.append("highlight")
TITLES["highlight"] = f"{len(FIGURES)}. Code highlighting while streaming"
PLOTTERS["highlight"] = plot_highlight
SECTIONS["highlight"] = section_highlight


# --- figure 12: a long chat with a reader's pause (bench/figures/longchat_pause.py) -------------------


def plot_longchat_pause(d, path):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, label, color in (
        ("no_pause", "no pause: every slide on the user's clock", COLORS["reprefill"]),
        ("pause", f"{d['params']['pause']:g} s reader's pause: slides prepared while idle", COLORS["chinwag"]),
    ):
        rows = d["runs"][name]
        ax.plot([r["turn"] for r in rows], [r["ttft_s"] for r in rows], color=color, label=label)
    ax.set_xlabel("turn")
    ax.set_ylabel("time to first token, s")
    ax.set_title(f"starter model, {d['params']['turns']} turns, context cap {d['params']['cap']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section_longchat_pause(d):
    p, s = d["params"], d["summary"]
    names = {"no_pause": "no pause", "pause": f"{p['pause']:g} s pause"}
    rows = [
        [
            names[k],
            f(v["early_ttft_s"]),
            f(v["late_ttft_s"]),
            f(v["late_over_early"]),
            f(v["max_late_ttft_s"]),
            v["slides_on_users_clock"],
            v["prepared_turns"],
        ]
        for k, v in s.items()
    ]
    late = "–".join(map(str, s["no_pause"]["late_turns"]))
    return [
        f"Figure 9's scripted chat through the Engine ({p['turns']} turns, context cap {p['cap']}, greedy replies of up "
        f"to {p['reply_tokens']} tokens), once with no pause and once with {p['pause']:g} s between turns, as a reader "
        "takes: then, after a turn that leaves the chat near its limit, the engine slides the window and re-reads it in "
        "the background. The two runs follow each other: interleaved turn by turn, each would preempt the other's "
        "background work. "
        f"Late = turns {late}; a slide on the user's clock is a turn that prefilled over 100 tokens.",
        "",
        table(
            [
                "run",
                "median TTFT turns 2–10, s",
                "median TTFT late, s",
                "late / early",
                "longest late TTFT, s",
                "slides on the user's clock",
                "turns with work prepared",
            ],
            rows,
        ),
    ]


FIGURES.append("longchat_pause")
TITLES["longchat_pause"] = f"{len(FIGURES)}. Long chats with a reader's pause"
PLOTTERS["longchat_pause"] = plot_longchat_pause
SECTIONS["longchat_pause"] = section_longchat_pause


if __name__ == "__main__":
    main()
