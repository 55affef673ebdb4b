"""Figure: concurrent clients on `chinwag serve` and mlx_lm.server: aggregate tokens per second.

The same `--requests` greedy requests (one user message each, a short story of `--reply-tokens`
tokens; every prompt different) are sent by 1, 2, 4 and 8 clients at once (client j sends
requests j, j + clients, ... one after another), to each server in turn, the order alternating
by level. Aggregate tokens per second: the completion tokens of a level over its wall time. One
client at a time is the baseline; every reply is compared with that request's reply from one
client (the same server), and with mlx_lm.server's.

Then, on the engine in this process (no server, speculation off on both), the cost of the
JSON-schema mask: the same prompt decoded unconstrained and as a `json_object`, alternately.

Both servers serve the same float32 copy of the starter (bench/figures/remote.py) with the same BLAS.

    python -m bench.figures.concurrent [--requests 16] [--reply-tokens 48]
"""

import argparse
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median
from bench.figures.remote import float32_copy
from bench.figures.server import start_both
from bench.reporting import COLORS, Figure, f, pyplot, table

SIDES = ("chinwag", "mlx_lm")
LEVELS = (1, 2, 4, 8)
SUBJECTS = (
    "a fox",
    "a lighthouse keeper",
    "a robot gardener",
    "two sailors",
    "an old baker",
    "a lost dragon",
    "a clockmaker",
    "a river otter",
    "a young astronomer",
    "a street musician",
    "a mountain guide",
    "a librarian owl",
    "a tired knight",
    "a beekeeper",
    "a train conductor",
    "a painter of doors",
)
MASK_PROMPT = [{"role": "user", "content": "Describe a cat as a JSON object with many fields."}]


def prompt(i: int) -> list:
    return [{"role": "user", "content": f"Write a short story about {SUBJECTS[i % len(SUBJECTS)]} (story {i})."}]


def ask(url: str, model: str, i: int, reply_tokens: int) -> dict:
    import httpx

    body = {"model": model, "messages": prompt(i), "max_tokens": reply_tokens, "temperature": 0.0}
    r = httpx.post(url + "/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    out = r.json()
    return {"request": i, "reply": out["choices"][0]["message"]["content"], "tokens": out["usage"]["completion_tokens"]}


def level(url: str, model: str, clients: int, requests: int, reply_tokens: int) -> dict:
    """`requests` requests from `clients` clients at once: each client's in turn."""

    def client(j: int) -> list:
        return [ask(url, model, i, reply_tokens) for i in range(j, requests, clients)]

    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        done = [r for rs in pool.map(client, range(clients)) for r in rs]
    seconds = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in done)
    return {"clients": clients, "seconds": seconds, "tokens": tokens, "tps": tokens / seconds, "replies": done}


def mask_cost(folder, reply_tokens: int, reps: int) -> dict:
    """Decode tokens per second of one prompt unconstrained and as a json_object, alternately (engine only)."""
    from engine import Engine, GenerationParams, TurnStats
    from engine.types import OutputKind, ResponseFormat

    async def run() -> dict:
        engine = Engine()
        await engine.load_model(str(folder))
        plain = GenerationParams(temperature=0.0, max_tokens=reply_tokens, speculative=False)
        constrained = GenerationParams(
            temperature=0.0,
            max_tokens=reply_tokens,
            speculative=False,
            response_format=ResponseFormat(OutputKind.JSON_OBJECT),
        )
        out: dict = {"plain": [], "json_object": [], "tokens": {}}
        try:
            for n in range(reps + 1):  # the first of each warms up (the mask's tokenizer bridge is built once)
                for kind, params in (("plain", plain), ("json_object", constrained)):
                    stats = None
                    async for ev in engine.chat(f"mask-{kind}-{n}", MASK_PROMPT, params):
                        if isinstance(ev, TurnStats):
                            stats = ev
                    assert stats is not None
                    out["tokens"][kind] = stats.generated_tokens
                    if n:
                        out[kind].append(stats.decode_tps)
        finally:
            await engine.close()
        return out

    got = asyncio.run(run())
    tps = {kind: median(got[kind]) for kind in ("plain", "json_object")}
    return {
        "decode_tps": tps,
        "tokens": got["tokens"],
        "mask_ms_per_token": (1 / tps["json_object"] - 1 / tps["plain"]) * 1e3,
        "reps": reps,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=8 if common.QUICK else 16)
    p.add_argument("--reply-tokens", type=int, default=8 if common.QUICK else 48)
    p.add_argument("--mask-reps", type=int, default=1 if common.QUICK else 3)
    p.add_argument("--folder", default="", help="serve this MLX folder instead (to check the script, not to quote)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    home = common.temp_home()
    folder = args.folder or float32_copy(home / "starter-float32")
    models = {"chinwag": str(folder), "mlx_lm": "default_model"}
    results: dict = {side: [] for side in SIDES}
    servers = start_both(folder, home)
    try:
        for side in SIDES:  # warm-up
            ask(servers[side][1], models[side], 0, 2)
        for n, clients in enumerate(LEVELS):
            for side in SIDES if n % 2 == 0 else SIDES[::-1]:
                got = level(servers[side][1], models[side], clients, args.requests, args.reply_tokens)
                results[side].append(got)
                log(
                    f"{side:7s} {clients} clients: {got['tps']:6.1f} tokens/s ({got['tokens']} in {got['seconds']:.1f} s)"
                )
    finally:
        for proc, _ in servers.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    mask = mask_cost(folder, args.reply_tokens * 2, args.mask_reps)
    log(f"mask: {json.dumps(mask)}")
    summary = summarise(results)
    summary["mask"] = mask
    log(json.dumps(summary, indent=1))
    params = {"requests": args.requests, "reply_tokens": args.reply_tokens, "levels": list(LEVELS)}
    command = f"python -m bench.figures.concurrent --requests {args.requests} --reply-tokens {args.reply_tokens}"
    common.save("concurrent", {"params": params, "levels": results, "summary": summary}, command, started)
    common.finish()


def summarise(results: dict) -> dict:
    """Per side and level: tokens per second, its ratio to one client, and replies equal to one client's."""
    out: dict = {}
    alone = {side: {r["request"]: r["reply"] for r in results[side][0]["replies"]} for side in SIDES}
    for side in SIDES:
        base = results[side][0]["tps"]
        out[side] = [
            {
                "clients": lv["clients"],
                "tps": lv["tps"],
                "speedup": lv["tps"] / base,
                "same_as_one_client": sum(r["reply"] == alone[side][r["request"]] for r in lv["replies"]),
                "requests": len(lv["replies"]),
            }
            for lv in results[side]
        ]
    out["same_across_servers"] = sum(alone["chinwag"][i] == alone["mlx_lm"].get(i) for i in alone["chinwag"])
    return out


# --- the report ------------------------------------------------------------------------------


def section(d, res):
    s, p = d["summary"], d["params"]
    c, m = s["chinwag"], s["mlx_lm"]
    rows = [
        [
            a["clients"],
            f(a["tps"], 1),
            f(a["speedup"]) + "x",
            f"{a['same_as_one_client']} of {a['requests']}",
            f(b["tps"], 1),
            f(b["speedup"]) + "x",
            f"{b['same_as_one_client']} of {b['requests']}",
            f(a["tps"] / b["tps"]) + "x",
        ]
        for a, b in zip(c, m, strict=True)
    ]
    four = next(a for a in c if a["clients"] == 4)
    met = four["speedup"] >= 1.8 and all(a["same_as_one_client"] == a["requests"] for a in c)
    mask = s["mask"]
    return [
        f"The same {p['requests']} greedy requests (a short story each, {p['reply_tokens']} tokens, every prompt "
        "different) sent by 1, 2, 4 and 8 clients at once, each client's requests one after another, to "
        "`chinwag serve` and `mlx_lm.server` in turn (the same float32 copy of the starter, the same BLAS, the "
        "order alternating by level). Tokens/s is a level's completion tokens over its wall time; the ratio is "
        "to one client at a time on the same server. Same replies: how many equal that request's reply with one "
        "client (on the same server). Chinwag decodes concurrent turns in one batch (engine/local/batcher.py); "
        "a turn alone speculates (the CPU's default) until another turn comes, turns in a batch decode one "
        "token a pass.",
        "",
        table(
            [
                "clients",
                "Chinwag tokens/s",
                "vs 1 client",
                "same replies",
                "mlx_lm.server tokens/s",
                "vs 1 client",
                "same replies",
                "Chinwag / mlx_lm",
            ],
            rows,
        ),
        "",
        f"Goal: 4 concurrent clients get at least 1.8x the aggregate tokens per second of one client at a time, "
        f"with identical greedy replies: {'**met**' if met else '**not met**'} ({f(four['speedup'])}x). "
        f"One client's replies equal on both servers: {s['same_across_servers']} of {p['requests']}.",
        "",
        "The JSON-schema mask (llguidance, engine/local/constrained.py), on the engine without a server: the same "
        f"prompt decoded greedily as plain text and as a `json_object`, speculation off for both, median of "
        f"{mask['reps']} each, alternating.",
        "",
        table(
            ["decode", "tokens/s", "tokens"],
            [
                ["plain", f(mask["decode_tps"]["plain"], 1), mask["tokens"]["plain"]],
                ["json_object", f(mask["decode_tps"]["json_object"], 1), mask["tokens"]["json_object"]],
            ],
        ),
        "",
        (
            f"The mask costs {f(mask['mask_ms_per_token'], 1)} ms per token here."
            if mask["mask_ms_per_token"] > 0
            else f"The constrained decode was not slower here ({f(-mask['mask_ms_per_token'], 1)} ms per token faster): "
            "the mask's cost is below this machine's noise."
        ),
    ]


def plot(d, res, path):
    plt = pyplot()
    s = d["summary"]
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for side, label in (("mlx_lm", "mlx_lm.server"), ("chinwag", "chinwag serve")):
        xs = [a["clients"] for a in s[side]]
        ax.plot(xs, [a["tps"] for a in s[side]], marker="o", color=COLORS[side], label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(LEVELS), [str(x) for x in LEVELS])
    ax.set_xlabel("concurrent clients")
    ax.set_ylabel("aggregate tokens/s")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def headline(d, res):
    c = d["summary"]["chinwag"]
    four = next(a for a in c if a["clients"] == 4)
    m4 = next(a for a in d["summary"]["mlx_lm"] if a["clients"] == 4)
    return [
        [
            "4 concurrent clients: aggregate tokens/s over one client at a time (Chinwag / mlx_lm.server)",
            f"{f(four['speedup'])}x / {f(m4['speedup'])}x",
            f"{f(four['tps'], 1)} vs {f(m4['tps'], 1)} tokens/s; {four['same_as_one_client']} of "
            f"{four['requests']} replies as with one client",
        ]
    ]


FIGURE = Figure(
    name="concurrent",
    title="Concurrent clients: batched decoding on the server",
    section=section,
    plot=plot,
    headline=headline,
)


if __name__ == "__main__":
    main()
