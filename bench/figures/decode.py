"""Figure 1: decode speed and time to first token, Chinwag's Engine against mlx_lm.stream_generate.

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
    from engine.models import registry

    started = time.perf_counter()
    path = common.starter_path()
    engine = Engine()
    await engine.load_model(registry.STARTER_ID)
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


if __name__ == "__main__":
    main()
