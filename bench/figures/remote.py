"""A 12-turn chat through mlx_lm.server on loopback, time to first token per turn.

Three sides, interleaved turn by turn (the order rotates every turn), greedy, each with its
own history:

  identical   Chinwag's remote backend: the full history sent byte-identical every turn, each
              reply exactly as the server sent it, so mlx_lm.server's prompt cache holds the
              whole history and a turn costs only its new tokens
  careless    the same server and client, but the history re-rendered before each request: the
              system prompt carries the time of the request (as clients that inject the current
              date and time do) and earlier replies are stored normalized (stripped, one trailing
              newline). The first bytes differ every turn, so the server re-prefills everything:
              the cache miss a careless client causes
  local       Chinwag's own engine on the same weights, in this process

The server serves a float32 copy of the starter (dequantized, as Chinwag runs it on the CPU)
with the same BLAS as this process, so the three sides run the same weights the same way.

    python -m bench.figures.remote [--turns 12] [--reply-tokens 16]
"""

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import ROOT, log
from bench.figures.followup import QUESTIONS
from bench.reporting import COLORS, Figure, f, pyplot, table

SIDES = ("identical", "careless", "local")
SERVE = (
    "import sys, runpy; from engine import cpu; cpu.preload_openblas(); "
    "sys.argv = ['mlx_lm.server', *sys.argv[1:]]; runpy.run_module('mlx_lm.server', run_name='__main__')"
)


def float32_copy(dest):
    """The starter written as a dense float32 MLX folder (what Chinwag runs on the CPU)."""
    from mlx_lm.utils import save_model

    from engine.local import blas, loading

    src = common.starter_path()
    model, _ = loading.load(src)
    model = blas.dequantize(model)
    dest.mkdir(parents=True, exist_ok=True)
    save_model(dest, model)
    config = json.loads((src / "config.json").read_text())
    for key in ("quantization", "quantization_config"):
        config.pop(key, None)
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    for name in src.iterdir():
        if name.name.startswith("tokenizer") or name.name in ("special_tokens_map.json", "generation_config.json"):
            shutil.copy(name, dest / name.name)
    del model
    return dest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(folder, log_path):
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "--model", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=open(log_path, "wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(log_path.parent / "no-hf")},
    )
    import httpx

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"mlx_lm.server exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc, f"http://127.0.0.1:{port}/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("mlx_lm.server did not start in 300 s")


def careless(history, turn):
    """The history as a careless client re-sends it: a timestamped system prompt, replies normalized."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(1_767_225_600 + 61 * turn))  # a new time per request
    out = []
    for m in history:
        if m["role"] == "system":
            m = {"role": "system", "content": f"Current time: {stamp}. {m['content']}"}
        elif m["role"] == "assistant":
            m = {"role": "assistant", "content": m["content"].strip() + "\n"}
        out.append(m)
    return out


async def main_async(args, url, folder):
    from engine import Engine, GenerationParams

    started = time.perf_counter()
    params = GenerationParams(temperature=0.0, max_tokens=args.reply_tokens)
    engines = {"identical": Engine(), "careless": Engine(), "local": Engine()}
    await engines["identical"].load_model(f"{url}#default_model")
    await engines["careless"].load_model(f"{url}#default_model")
    await engines["local"].load_model(str(folder))
    system = [{"role": "system", "content": "You are a helpful travel guide. Answer in one or two sentences."}]
    history = {side: list(system) for side in SIDES}
    rows = {side: [] for side in SIDES}
    # Warm-up: one short request on each side, outside the chat.
    for side in SIDES:
        await common.timed_chat(engines[side], f"warm-{side}", [{"role": "user", "content": "Hi"}], params)
    for turn in range(args.turns):
        order = SIDES[turn % 3 :] + SIDES[: turn % 3]
        for side in order:
            history[side].append({"role": "user", "content": QUESTIONS[turn % len(QUESTIONS)]})
            sent = careless(history[side], turn) if side == "careless" else history[side]
            ttft, text, stats = await common.timed_chat(engines[side], side, sent, params)
            history[side].append({"role": "assistant", "content": text})
            rows[side].append(
                {
                    "turn": turn + 1,
                    "ttft_s": ttft,
                    "prompt_tokens": stats.prompt_tokens,
                    "reused_tokens": stats.reused_tokens,
                    "prefilled_tokens": stats.prefilled_tokens,
                    "generated_tokens": stats.generated_tokens,
                }
            )
            log(
                f"turn {turn + 1:2d} {side:9s} ttft {ttft:6.2f} s  prompt {stats.prompt_tokens:4d}  "
                f"reused {stats.reused_tokens:4d}"
            )
    for engine in engines.values():
        await engine.close()
    last = {side: rs[-1] for side, rs in rows.items()}
    follow = lambda side: [r["ttft_s"] for r in rows[side][1:]]  # noqa: E731
    summary = {
        "last_turn": last,
        "last_turn_careless_over_identical": last["careless"]["ttft_s"] / last["identical"]["ttft_s"],
        "last_turn_identical_over_local": last["identical"]["ttft_s"] / last["local"]["ttft_s"],
        "median_followup_careless_over_identical": common.median(
            [c / i for c, i in zip(follow("careless"), follow("identical"))]
        ),
        "identical_reused_share_last": last["identical"]["reused_tokens"] / max(1, last["identical"]["prompt_tokens"]),
        "careless_reused_share_last": last["careless"]["reused_tokens"] / max(1, last["careless"]["prompt_tokens"]),
    }
    common.save(
        "remote",
        {"params": {"turns": args.turns, "reply_tokens": args.reply_tokens}, "rows": rows, "summary": summary},
        f"python -m bench.figures.remote --turns {args.turns} --reply-tokens {args.reply_tokens}",
        started,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=4 if common.QUICK else 12)
    p.add_argument("--reply-tokens", type=int, default=6 if common.QUICK else 16)
    args = p.parse_args(argv)
    home = common.temp_home()
    folder = float32_copy(home / "starter-float32")
    log(f"serving {folder} with mlx_lm.server")
    proc, url = start_server(folder, home / "server.log")
    try:
        asyncio.run(main_async(args, url, folder))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
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
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(d, res):
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


FIGURE = Figure(name="remote", title="Models served elsewhere: mlx_lm.server on loopback", section=section, plot=plot)


if __name__ == "__main__":
    main()
