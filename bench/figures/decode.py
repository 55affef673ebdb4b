"""Decode speed and time to first token, Chinwag's Engine against mlx_lm.stream_generate.

Same process, same starter model loaded the same way (engine.local.loading.load: float32
parameters on CPU and, with OpenBLAS loaded, the weights dequantized to float32; --quantized
keeps them quantized, as on a machine without OpenBLAS), same prompt token ids, greedy, N
new tokens. The two sides alternate
within each repetition (the first side swaps every repetition). Both are timed from the
caller's side: from the call (chat template and tokenizing included) to each token.

    python -m bench.figures.decode [--reps 5] [--tokens 128] [--quantized]
"""

import argparse
import asyncio
import time
import uuid

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, ratio
from bench.reporting import COLORS, Figure, Run, f, model_label, pyplot, ratio_word, table
from engine.models.folders import STARTER_ID

PROMPT = (
    "Write a long, detailed story about a lighthouse keeper who finds an old map "
    "hidden in the wall of the lighthouse. Describe every place she visits."
)


def _summary(times, tokens):
    """(ttft, decode tok/s) from the call time and each token's arrival time."""
    t0, arrivals = times[0], times[1:]
    ttft = arrivals[0] - t0
    span = arrivals[-1] - arrivals[0]
    return ttft, (len(arrivals) - 1) / span if span > 0 else float("nan")


async def run_chinwag(engine, messages, max_tokens):
    from engine import GenerationParams, TextDelta

    conv = f"bench-decode-{uuid.uuid4().hex[:8]}"
    params = GenerationParams(temperature=0.0, max_tokens=max_tokens)
    times, tokens, stats = [time.perf_counter()], [], None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            if ev.token_ids:
                times.append(time.perf_counter())
                tokens.extend(ev.token_ids)
        else:
            stats = ev
    await engine.forget(conv)
    ttft, tps = _summary(times, tokens)
    return {
        "ttft_s": ttft,
        "decode_tps": tps,
        "tokens": len(tokens),
        "ids": tokens,
        "own_decode_tps": stats.decode_tps,
        "own_ttft_s": stats.ttft_s,
        "prompt_tokens": stats.prompt_tokens,
    }


def run_mlx_lm(model, tokenizer, messages, max_tokens):
    import mlx.core as mx
    from mlx_lm import stream_generate

    t0 = time.perf_counter()
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    if isinstance(ids, str):  # templates that return text
        ids = tokenizer.encode(ids, add_special_tokens=False)
    times, tokens, last = [t0], [], None
    for r in stream_generate(model, tokenizer, list(ids), max_tokens=max_tokens):
        if r.finish_reason is None or r.token not in tokenizer.eos_token_ids:
            times.append(time.perf_counter())
            tokens.append(r.token)
        last = r
    mx.clear_cache()
    ttft, tps = _summary(times, tokens)
    return {
        "ttft_s": ttft,
        "decode_tps": tps,
        "tokens": len(tokens),
        "ids": tokens,
        "own_decode_tps": last.generation_tps,
        "own_prefill_tps": last.prompt_tps,
        "prompt_tokens": len(ids),
    }


async def main_async(args):
    from engine import Engine
    from engine.local import loading

    started = time.perf_counter()
    path = common.starter_path()
    engine = Engine()
    await engine.load_model(STARTER_ID)
    model, tokenizer = loading.load(path)  # what the engine does: float32 parameters on CPU
    messages = [{"role": "user", "content": PROMPT}]

    log("warm-up")
    await run_chinwag(engine, messages, 4)
    run_mlx_lm(model, tokenizer, messages, 4)

    runs = {"chinwag": [], "mlx_lm": []}
    for rep in range(args.reps):
        order = ["chinwag", "mlx_lm"] if rep % 2 == 0 else ["mlx_lm", "chinwag"]
        for side in order:
            if side == "chinwag":
                r = await run_chinwag(engine, messages, args.tokens)
            else:
                r = run_mlx_lm(model, tokenizer, messages, args.tokens)
            r["rep"] = rep
            runs[side].append(r)
            log(f"rep {rep} {side}: ttft {r['ttft_s']:.2f}s, decode {r['decode_tps']:.2f} tok/s, {r['tokens']} tokens")
    await engine.close()

    same = all(a["ids"] == b["ids"] for a, b in zip(runs["chinwag"], runs["mlx_lm"]))
    for side in runs.values():
        for r in side:
            r.pop("ids")
    per_rep = [
        ratio(a["decode_tps"], b["decode_tps"])
        for a, b in zip(sorted(runs["chinwag"], key=lambda r: r["rep"]), sorted(runs["mlx_lm"], key=lambda r: r["rep"]))
    ]
    summary = {
        side: {
            "ttft_s": median([r["ttft_s"] for r in rs]),
            "decode_tps": median([r["decode_tps"] for r in rs]),
            "own_decode_tps": median([r["own_decode_tps"] for r in rs]),
            "tokens": median([r["tokens"] for r in rs]),
            "prompt_tokens": rs[0]["prompt_tokens"],
        }
        for side, rs in runs.items()
    }
    summary["decode_ratio"] = ratio(summary["chinwag"]["decode_tps"], summary["mlx_lm"]["decode_tps"])
    summary["ttft_ratio"] = ratio(summary["chinwag"]["ttft_s"], summary["mlx_lm"]["ttft_s"])
    summary["per_rep_decode_ratio"] = per_rep
    summary["same_tokens"] = same
    name = "decode_quantized" if args.quantized else "decode"
    common.save(
        name,
        {
            "params": {"reps": args.reps, "tokens": args.tokens, "prompt": PROMPT, "quantized": args.quantized},
            "model": describe(model),
            "runs": runs,
            "summary": summary,
        },
        f"python -m bench.figures.decode --reps {args.reps} --tokens {args.tokens}"
        + (" --quantized" if args.quantized else ""),
        started,
    )


def describe(model) -> dict:
    """How engine.local.loading.load left the model: quantized or not, and the dtype of its weights."""
    import mlx.nn as nn

    quantized = any(isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding)) for _, m in model.named_modules())
    dtype = str(model.model.embed_tokens.weight.dtype if not quantized else model.model.embed_tokens.scales.dtype)
    return {"quantized": quantized, "dtype": dtype.replace("mlx.core.", "")}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(5))
    p.add_argument("--tokens", type=int, default=16 if common.QUICK else 128)
    p.add_argument(
        "--quantized",
        action="store_true",
        help="keep the model quantized (CHINWAG_CPU_DEQUANTIZE=0): the engine's path without OpenBLAS",
    )
    args = p.parse_args(argv)
    if args.quantized:
        import os

        os.environ["CHINWAG_CPU_DEQUANTIZE"] = "0"
    asyncio.run(main_async(args))
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    dq = res.get("decode_quantized")
    plt = pyplot()
    groups = [(d, model_label(d))] + ([(dq, model_label(dq))] if dq else [])
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


def section(d, res):
    dq = res.get("decode_quantized")
    groups = [d] + ([dq] if dq else [])
    p = d["params"]
    first = d["summary"]["chinwag"]
    rows = []
    for x in groups:
        s = x["summary"]
        c, m = s["chinwag"], s["mlx_lm"]
        label = model_label(x)
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
    ratios = ", ".join(f"**{x['summary']['decode_ratio']:.2f}** ({model_label(x)})" for x in groups)
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
            f"({model_label(x)})"
            for x in groups
        )
        + "."
        + "".join(
            f" **mlx-lm is faster** ({model_label(x)}, {x['summary']['ttft_ratio']:.2f}x)"
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


def headline(d, res):
    rows = []
    for x in (d, res.get("decode_quantized")):
        if x is None:
            continue
        s, label = x["summary"], model_label(x)
        rows.append(
            [
                f"decode tok/s, Chinwag / mlx-lm (goal ≥ 1.0), starter {label}",
                f"**{s['decode_ratio']:.2f}**",
                f"{f(s['chinwag']['decode_tps'])} vs {f(s['mlx_lm']['decode_tps'])} tok/s",
            ]
        )
        rows.append(
            [
                f"time to first token, Chinwag / mlx-lm, starter {label}",
                f"{s['ttft_ratio']:.2f}",
                f"{f(s['chinwag']['ttft_s'])} vs {f(s['mlx_lm']['ttft_s'])} s (mlx-lm better above 1)",
            ]
        )
    return rows


FIGURE = Figure(
    name="decode",
    title="Decode speed and time to first token",
    section=section,
    plot=plot,
    headline=headline,
    extra_runs=(Run("decode_quantized", ("--quantized",), "Quantized"),),
)


if __name__ == "__main__":
    main()
