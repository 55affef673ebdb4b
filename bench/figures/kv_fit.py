"""Fitting the machine: memory per model, and what quantized KV caches (--kv-bits 8|4) cost and save.

For the starter and Gemma 3 270M (both installed by the set-up): the resident memory after
loading (a child process per model: RSS before and after `Engine.load_model`) beside the plan's
weights (engine/models/fit.py), the cache's bytes per token at full precision, 8 and 4 bits (the
plan's, and measured: `kv_bytes` / tokens after a chat), the longest context that fits under 1 GB
and 2 GB; time per generated token (32 tokens, EOS banned, plain decoding) after about 2K and 8K
tokens of history, each setting on its own loaded Engine, the turns interleaved (a regenerate
each rep: the history comes from the cache), median over reps, ratios against full precision;
greedy agreement with the full-precision cache over a 12-turn chat (replies equal, and the share
of each reply's tokens equal before the first difference); and the perplexity of the first 2,048
tokens of bench/data/alice.txt (Lewis Carroll, public domain) read through the cache in chunks of
128 tokens at each setting. An 8K history too slow for `--budget-s` of CPU is skipped and says so.

    python -m bench.figures.kv_fit [--reps 3] [--budget-s 1500]
"""

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, timed_chat
from bench.reporting import Figure, f, table

SETTINGS = ["full", "8-bit", "4-bit"]
BITS = {"full": None, "8-bit": 8, "4-bit": 4}
HISTORIES = [2000, 8000]
GEN_TOKENS = 32
TEXT = Path(__file__).resolve().parent.parent / "data" / "alice.txt"
TEXT_TOKENS = 2048
CHUNK = 128
LIMITS = {"1 GB": 10**9, "2 GB": 2 * 10**9}
QUESTIONS = [
    "What is the capital of France?",
    "Name three colours of the rainbow.",
    "Why is the sky blue? One sentence.",
    "Write a short poem about the sea.",
    "What is 12 times 7?",
    "Give me a tip for sleeping well.",
    "Who wrote Romeo and Juliet?",
    "Describe a cat in two sentences.",
    "What do bees make?",
    "Suggest a name for a small boat.",
    "How many days are in a leap year?",
    "Say goodbye politely.",
]


def kvq(setting: str):
    from engine.types import KVQuantization

    bits = BITS[setting]
    return KVQuantization(bits) if bits else None


def rss() -> int:
    """This process's resident memory now (Linux's VmRSS; elsewhere its peak)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return common.peak_rss_bytes()


def resident_child(spec: str) -> None:
    """In a child process: the RSS before and after loading `spec` (JSON on stdout)."""
    before = rss()

    async def main():
        from engine import Engine

        engine = Engine(idle_work=False)
        try:
            await engine.start()
            imported = rss()
            t0 = time.perf_counter()
            await engine.load_model(spec)
            return imported, time.perf_counter() - t0, rss()
        finally:
            await engine.close()

    imported, seconds, after = asyncio.run(main())
    print(json.dumps({"start": before, "imported": imported, "loaded": after, "load_s": seconds}))


def resident(spec: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "bench.figures.kv_fit", "--resident", spec],
        capture_output=True,
        text=True,
        cwd=common.ROOT,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def plan_rows(path: Path, context_length: int) -> dict:
    from engine.models import fit

    rows = {}
    for s in SETTINGS:
        p = fit.plan(path, 10**9, kvq(s))
        longest = {k: min(fit.plan(path, v, kvq(s)).longest_context, context_length) for k, v in LIMITS.items()}
        rows[s] = {"per_token": p.per_token, "fixed": p.fixed, "weights": p.weights, "longest": longest}
    return rows


def perplexity(model, ids: list, setting: str) -> float:
    """exp(mean NLL) of ids[1:], read through a conversation cache at `setting` in CHUNK-token pieces."""
    import mlx.core as mx

    from engine.context.conversation import ConversationCache

    conv = ConversationCache.create(model, len(ids), kvq(setting))
    nll, n = 0.0, 0
    for start in range(0, len(ids) - 1, CHUNK):
        piece = ids[start : start + CHUNK]
        logits = model(mx.array(piece)[None], cache=conv.layers)[0].astype(mx.float32)
        conv.token_ids.extend(piece)
        targets = ids[start + 1 : start + 1 + len(piece)]
        logits = logits[: len(targets)]
        picked = mx.take_along_axis(logits, mx.array(targets)[:, None], axis=-1)[:, 0]
        total = (mx.logsumexp(logits, axis=-1) - picked).sum()
        nll += float(total.item())
        n += len(targets)
    return math.exp(nll / n)


def quality_text(path: Path) -> dict:
    """Perplexity of the fixed text at each setting, on the model as the engine loads it."""
    from engine.local import loading

    model, tokenizer = loading.load(path)
    ids = tokenizer.encode(TEXT.read_text())[:TEXT_TOKENS]
    out = {"tokens": len(ids)}
    for s in SETTINGS:
        t0 = time.perf_counter()
        out[s] = perplexity(model, ids, s)
        log(f"perplexity {s}: {out[s]:.3f} ({time.perf_counter() - t0:.1f} s)")
    return {**out, "eos": sorted(tokenizer.eos_token_ids)}


def history_messages(tokens: int) -> list:
    """About `tokens` tokens of English chat, ending with a request for a long answer."""
    from bench.figures.families import history_messages as base

    return base(tokens)[:-1] + [{"role": "user", "content": "Tell the whole story again, in detail."}]


def no_eos(eos: list):
    def processor(tokens, logits):
        import mlx.core as mx

        logits[:, mx.array(eos)] = -float("inf")
        return logits

    return processor


async def engines(spec: str) -> dict:
    from engine import Engine

    out = {}
    for s in SETTINGS:
        engine = Engine(idle_work=False, kv_quantization=kvq(s))
        await engine.load_model(spec)
        out[s] = engine
    return out


async def timing(es: dict, history: int, reps: int, eos: list, context_length: int) -> dict:
    """Per setting: the history's first read (s), then reps of a regenerate: ms per generated token."""
    from engine import GenerationParams

    messages = history_messages(min(history, context_length - GEN_TOKENS - 600))
    first = GenerationParams(temperature=0.0, max_tokens=1, speculative=False)
    params = GenerationParams(
        temperature=0.0, max_tokens=GEN_TOKENS, speculative=False, logits_processors=(no_eos(eos),)
    )
    conv = f"history-{history}"
    out: dict = {s: {"ms_per_token": []} for s in SETTINGS}
    for s in SETTINGS:
        t0 = time.perf_counter()
        _, _, stats = await timed_chat(es[s], conv, messages, first)
        out[s].update(read_s=time.perf_counter() - t0, prompt_tokens=stats.prompt_tokens)
        log(f"history {history} {s}: read {stats.prompt_tokens} tokens in {out[s]['read_s']:.1f} s")
    for rep in range(reps):
        order = SETTINGS[rep % 3 :] + SETTINGS[: rep % 3]
        for s in order:
            _, _, stats = await timed_chat(es[s], conv, messages, params)
            out[s]["ms_per_token"].append(1000 / stats.decode_tps if stats.decode_tps else float("nan"))
            out[s]["kv_bytes"] = stats.kv_bytes
            out[s]["reused"] = stats.reused_tokens
    for s in SETTINGS:
        out[s]["median_ms"] = statistics.median(out[s]["ms_per_token"])
        await es[s].forget(conv)
    return out


async def agreement(es: dict) -> dict:
    """A 12-turn greedy chat per setting: which replies equal the full-precision one's."""
    from engine import GenerationParams

    params = GenerationParams(temperature=0.0, max_tokens=48)
    replies: dict = {s: [] for s in SETTINGS}
    last: dict = {}
    for s in SETTINGS:
        messages: list = []
        for q in QUESTIONS:
            messages.append({"role": "user", "content": q})
            _, text, stats = await timed_chat(es[s], "agree", messages, params)
            messages.append({"role": "assistant", "content": text})
            replies[s].append(list(stats.reply_ids))
            last[s] = {"kv_bytes": stats.kv_bytes, "prompt": stats.prompt_tokens, "reused": stats.reused_tokens}
        await es[s].forget("agree")
    out = {"last_turn": last}
    for s in SETTINGS[1:]:
        equal = sum(1 for a, b in zip(replies["full"], replies[s], strict=True) if a == b)
        shares = []
        for a, b in zip(replies["full"], replies[s], strict=True):
            same = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
            shares.append(same / max(len(a), 1))
        out[s] = {"equal": equal, "turns": len(QUESTIONS), "prefix_share": statistics.mean(shares)}
        log(f"agreement {s}: {equal} of {len(QUESTIONS)} replies equal")
    return out


async def model_part(spec: str, reps: int, deadline: float, histories: list) -> dict:
    from engine.local.session import context_length_of
    from engine.models import registry

    path, info = registry.resolve_model(spec)
    context_length = info.context_length or context_length_of(path)
    d: dict = {"spec": spec, "name": info.name, "context_length": context_length}
    d["resident"] = resident(spec)
    log(f"{spec}: resident {d['resident']}")
    d["plan"] = plan_rows(path, context_length)
    d["perplexity"] = quality_text(path)
    eos = d["perplexity"].pop("eos")
    es = await engines(spec)
    try:
        d["agreement"] = await agreement(es)
        d["timing"] = {}
        for history in histories:
            if d["timing"]:  # the next history's cost, from the first one's reads
                read = sum(v["read_s"] for v in d["timing"][str(histories[0])].values())
                guess = read * (history / histories[0]) ** 1.5  # measured: 4x the tokens read in ~6x the time
                if time.perf_counter() + guess > deadline:
                    d["timing"][str(history)] = {"skipped": f"reading it three times would take about {guess:.0f} s"}
                    log(f"{spec}: {history} tokens skipped ({guess:.0f} s expected)")
                    continue
            d["timing"][str(history)] = await timing(es, history, reps, eos, context_length)
    finally:
        for e in es.values():
            await e.close()
    return d


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--budget-s", type=float, default=1500, help="CPU seconds the whole run may take")
    p.add_argument("--histories", default=",".join(map(str, HISTORIES)), help="tokens of history to time after")
    p.add_argument("--models", default="", help="comma-separated model ids (default: the starter and Gemma 3 270M)")
    p.add_argument("--resident", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.resident:
        resident_child(args.resident)
        return
    from engine.models.folders import GEMMA_ID, STARTER_ID

    common.temp_home()
    started = time.perf_counter()
    deadline = started + args.budget_s
    specs = args.models.split(",") if args.models else [STARTER_ID, GEMMA_ID]
    models = []
    for i, spec in enumerate(specs):
        share = started + args.budget_s * (i + 1) / len(specs)  # each model its share of the budget
        histories = [int(h) for h in args.histories.split(",")]
        models.append(asyncio.run(model_part(spec, args.reps, min(deadline, share), histories)))
    if args.models:  # one model measured again: the others' rows stay as they were
        kept = common.RESULTS / "kv_fit.json"
        earlier = json.loads(kept.read_text())["models"] if kept.exists() else []
        fresh = {m["spec"]: m for m in models}
        models = [fresh.pop(m["spec"], m) for m in earlier] + list(fresh.values())
    common.save(
        "kv_fit",
        {"params": {k: v for k, v in vars(args).items() if k != "resident"}, "models": models},
        f"python -m bench.figures.kv_fit --reps {args.reps} --budget-s {args.budget_s:g} --histories {args.histories}",
        started,
    )
    common.finish()


# --- report -----------------------------------------------------------------------------


def _mb(n) -> str:
    return f"{n / 10**6:,.0f} MB"


def _per_token(n) -> str:
    return f"{n / 1024:,.1f} KiB"


def _tokens(n) -> str:
    return f"{n:,}"


def _first_timed(m) -> dict | None:
    """The shortest timed history's results per setting (the same tokens held at each)."""
    return next((t for t in m["timing"].values() if "skipped" not in t), None)


def section(d, res):
    lines = [
        "Each model as Chinwag loads it on this machine (float32 on the CPU; small quantized models "
        "dequantized on OpenBLAS), its KV cache at full precision and with `--kv-bits 8` / `--kv-bits 4` "
        "(groups of 64). Bytes per token are the plan's (engine/models/fit.py) for the layers that keep "
        "every token, and measured: `kv_bytes` / tokens held after the shortest timed history (the "
        "buffer's reserved room, sliding windows and their checkpoints included; KV vs full compares "
        "those at the same tokens); the longest context is the plan's under each limit, at most the "
        "model's own (0: the weights alone do not fit). Time per token: 32 generated tokens after the history (read once, then "
        "regenerated each rep from the cache), interleaved settings, median; and the time the history "
        "took to read into the empty cache, once. Agreement: a greedy "
        "12-turn chat per setting, replies equal to the full-precision run's, and the mean share of a "
        "reply's tokens equal before the first difference. Perplexity: the first 2,048 tokens of "
        "*Alice's Adventures in Wonderland* (bench/data/alice.txt) read through the cache in "
        "128-token chunks.",
        "",
    ]
    for m in d["models"]:
        r = m["resident"]
        lines += [
            f"**{m['name']}** (context {m['context_length']:,}): resident {_mb(r['loaded'] - r['imported'])} "
            f"after loading (the plan says {_mb(m['plan']['full']['weights'])} of weights; "
            f"{_mb(r['loaded'])} for the whole process), loaded in {r['load_s']:.1f} s.",
            "",
        ]
        held = _first_timed(m)
        rows = []
        for s in SETTINGS:
            pl, a = m["plan"][s], m["agreement"].get(s)
            rows.append(
                [
                    s,
                    _per_token(pl["per_token"]),
                    _per_token(held[s]["kv_bytes"] / held[s]["prompt_tokens"]) if held else "–",
                    f"{held[s]['kv_bytes'] / held['full']['kv_bytes']:.2f}" if held else "–",
                    *(_tokens(pl["longest"][k]) for k in LIMITS),
                    f(m["perplexity"][s], 3),
                    f"{a['equal']} of {a['turns']} ({a['prefix_share']:.0%})" if a else "–",
                ]
            )
        lines += [
            table(
                [
                    "cache",
                    "bytes/token (plan)",
                    "bytes/token (measured)",
                    "KV vs full",
                    "longest in 1 GB",
                    "longest in 2 GB",
                    f"perplexity ({m['perplexity']['tokens']:,} tokens)",
                    "replies equal to full (token share)",
                ],
                rows,
            ),  # fmt: skip
            "",
        ]
        trows = []
        for h, t in m["timing"].items():
            if "skipped" in t:
                trows.append([f"~{int(h):,}", "skipped: " + t["skipped"], "", ""])
                continue
            full = t["full"]["median_ms"]
            trows.append(
                [f"{t['full']['prompt_tokens']:,}"]
                + [
                    f"{t[s]['median_ms']:.1f} ms"
                    + ("" if s == "full" else f" ({t[s]['median_ms'] / full:.2f}x)")
                    + f"; history read in {t[s]['read_s']:.0f} s"
                    for s in SETTINGS
                ]  # fmt: skip
            )
        lines += [table(["history (tokens)", *(f"{s} ms/token" for s in SETTINGS)], trows), ""]
    return lines


def headline(d, res):
    rows = []
    for m in d["models"]:
        held = _first_timed(m)
        if held:
            rows.append(
                [
                    f"{m['name']}: KV at 4 bits / full, {held['full']['prompt_tokens']:,} tokens",
                    f"**{held['4-bit']['kv_bytes'] / held['full']['kv_bytes']:.2f}x**",
                    f"perplexity {f(m['perplexity']['full'], 2)} → {f(m['perplexity']['4-bit'], 2)}",
                ]  # fmt: skip
            )
    return rows


FIGURE = Figure(name="kv_fit", title="Fitting the machine: quantized KV caches", section=section, headline=headline)


if __name__ == "__main__":
    main()
