"""Time to first token of each turn of a 12-turn chat, against the history's length.

Three ways to answer the same chat on the starter model, greedy, interleaved turn by turn
(the order rotates every turn):

  chinwag     one Engine conversation: its cache keeps the history, a turn prefills only
              its new tokens (the previous reply's ids are spliced in, never re-tokenized)
  re-prefill  the Engine with a new conversation id for every turn: the whole history is
              prefilled (what `chinwag replay --no-cache` does); with a quantized model (~10
              tok/s prefill) only on a subset of the turns and passes
  mlx-lm      mlx_lm.server's pattern: LRUPromptCache.fetch_nearest_cache, stream_generate
              on the rest of the prompt, insert_cache with the prompt and the reply's tokens

Each side chats with its own replies; re-prefill is given chinwag's history. The chat runs
--passes times (fresh conversations each time, the order of the sides rotated); a turn's
TTFT is the median over the passes.

    python -m bench.figures.followup [--turns 12] [--reply-tokens 16] [--passes 3]
"""

import argparse
import asyncio
import time
import uuid

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, timed_chat
from bench.reporting import COLORS, Figure, f, model_label, pyplot, table
from engine.models.folders import STARTER_ID

QUESTIONS = [
    "What is the capital of France?",
    "Tell me one fact about its history.",
    "Which river runs through it?",
    "Name a famous museum there.",
    "What is a typical food from that region?",
    "How do people usually travel around the city?",
    "What is the weather like in spring?",
    "Suggest a short day trip from the city.",
    "Which language is spoken there?",
    "Give me a useful phrase in that language.",
    "What is a good souvenir to bring home?",
    "Summarise our conversation in one sentence.",
]


def reprefill_turns(turns: int, every: int) -> list:
    """The turns (1-based) measured with a full re-prefill: first, every `every`-th, last."""
    return sorted({1, turns} | set(range(every, turns + 1, every)))


async def chinwag_turn(engine, conv, messages, max_tokens):
    from engine import GenerationParams

    params = GenerationParams(temperature=0.0, max_tokens=max_tokens)
    ttft, text, stats = await timed_chat(engine, conv, messages, params)
    return {
        "ttft_s": ttft,
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "engine_ttft_s": stats.ttft_s,
    }, text


class MlxLmChat:
    """mlx_lm.server's prompt cache reuse, one request at a time."""

    def __init__(self, model, tokenizer):
        from mlx_lm.models.cache import LRUPromptCache

        self.model, self.tokenizer = model, tokenizer
        self.cache = LRUPromptCache()

    def turn(self, messages, max_tokens):
        import mlx.core as mx
        from mlx_lm import stream_generate
        from mlx_lm.models.cache import make_prompt_cache

        t0 = time.perf_counter()
        prompt = list(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))
        cache, rest = self.cache.fetch_nearest_cache("starter", prompt)
        cached = len(prompt) - len(rest)
        if cache is None:
            cache = make_prompt_cache(self.model)
        key = prompt[:]
        first, text = None, []
        for r in stream_generate(
            self.model, self.tokenizer, prompt[cached:], max_tokens=max_tokens, prompt_cache=cache
        ):
            if first is None:
                first = time.perf_counter()
            text.append(r.text)
            if r.finish_reason is None or r.token not in self.tokenizer.eos_token_ids:
                key.append(r.token)
        self.cache.insert_cache("starter", key, cache)
        mx.clear_cache()
        return {
            "ttft_s": first - t0,
            "prompt_tokens": len(prompt),
            "reused_tokens": cached,
            "prefilled_tokens": len(prompt) - cached,
        }, "".join(text)


async def main_async(args):
    from engine import Engine
    from engine.local import loading

    started = time.perf_counter()
    path = common.starter_path()
    engine = Engine()
    await engine.load_model(STARTER_ID)
    model, tokenizer = loading.load(path)
    from bench.figures.decode import describe

    info = describe(model)
    # A quantized model prefills ~10 tok/s here: re-prefilling every turn would take minutes.
    every = args.reprefill_every or (3 if info["quantized"] else 1)
    reprefill_all_passes = not info["quantized"]
    questions = (QUESTIONS * ((args.turns + len(QUESTIONS) - 1) // len(QUESTIONS)))[: args.turns]
    subset = reprefill_turns(args.turns, every)

    log("warm-up")
    warm = [{"role": "user", "content": "Hi"}]
    await chinwag_turn(engine, "bench-warm", warm, 2)
    await engine.forget("bench-warm")
    MlxLmChat(model, tokenizer).turn(warm, 2)

    raw = {"chinwag": [], "reprefill": [], "mlx_lm": []}
    same_replies = True
    for pass_ in range(args.passes):
        conv = f"bench-followup-{uuid.uuid4().hex[:8]}"
        mlx_chat = MlxLmChat(model, tokenizer)
        history = {"chinwag": [], "mlx_lm": []}
        rows = {"chinwag": [], "reprefill": [], "mlx_lm": []}
        for i, q in enumerate(questions):
            turn = i + 1
            for side in history:
                history[side].append({"role": "user", "content": q})
            sides = ["chinwag", "mlx_lm"] + (
                ["reprefill"] if turn in subset and (pass_ == 0 or reprefill_all_passes) else []
            )
            k = (i + pass_) % len(sides)
            for side in sides[k:] + sides[:k]:
                if side == "chinwag":
                    r, reply = await chinwag_turn(engine, conv, history["chinwag"], args.reply_tokens)
                elif side == "reprefill":
                    # chinwag's history so far (the reply to this turn is not in it yet)
                    once = f"bench-reprefill-{uuid.uuid4().hex[:8]}"
                    r, _ = await chinwag_turn(engine, once, list(history["chinwag"]), 1)
                    await engine.forget(once)
                else:
                    r, reply = mlx_chat.turn(history["mlx_lm"], args.reply_tokens)
                r.update(turn=turn, pass_=pass_)
                rows[side].append(r)
                if side != "reprefill":
                    r["_reply"] = reply
                log(
                    f"pass {pass_} turn {turn} {side}: prompt {r['prompt_tokens']}, prefilled "
                    f"{r['prefilled_tokens']}, ttft {r['ttft_s']:.2f}s"
                )
            for side in history:
                row = next(x for x in rows[side] if x["turn"] == turn)
                history[side].append({"role": "assistant", "content": row.pop("_reply")})
        await engine.forget(conv)
        same_replies = same_replies and history["chinwag"] == history["mlx_lm"]
        for side in raw:
            raw[side] += rows[side]
    await engine.close()

    # Per turn: the median TTFT over the passes; token counts from the first pass.
    turns = {}
    for side, rs in raw.items():
        turns[side] = []
        for t in sorted({r["turn"] for r in rs}):
            at = [r for r in rs if r["turn"] == t]
            turns[side].append(
                {**at[0], "ttft_s": median([r["ttft_s"] for r in at]), "ttft_each_s": [r["ttft_s"] for r in at]}
            )
    cw = turns["chinwag"]
    summary = {
        "chinwag_first_ttft_s": cw[0]["ttft_s"],
        "chinwag_last_ttft_s": cw[-1]["ttft_s"],
        "chinwag_last_over_first": cw[-1]["ttft_s"] / cw[0]["ttft_s"],
        "mlx_lm_last_over_first": turns["mlx_lm"][-1]["ttft_s"] / turns["mlx_lm"][0]["ttft_s"],
        "last_turn": {side: rs[-1] for side, rs in turns.items()},
        "last_turn_reprefill_over_chinwag": turns["reprefill"][-1]["ttft_s"] / cw[-1]["ttft_s"],
        "last_turn_mlx_lm_over_chinwag": turns["mlx_lm"][-1]["ttft_s"] / cw[-1]["ttft_s"],
        "median_followup_ttft_ratio_mlx_lm_over_chinwag": median(
            [m["ttft_s"] / c["ttft_s"] for c, m in zip(cw[1:], turns["mlx_lm"][1:])]
        ),
        "same_replies": same_replies,
    }
    common.save(
        "followup",
        {
            "params": {
                "turns": args.turns,
                "reply_tokens": args.reply_tokens,
                "reprefill_turns": subset,
                "passes": args.passes,
                "reprefill_all_passes": reprefill_all_passes,
            },
            "model": info,
            "rows": turns,
            "raw": raw,
            "summary": summary,
        },
        f"python -m bench.figures.followup --turns {args.turns} --reply-tokens {args.reply_tokens} "
        f"--passes {args.passes}" + (f" --reprefill-every {args.reprefill_every}" if args.reprefill_every else ""),
        started,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=4 if common.QUICK else 12)
    p.add_argument("--reply-tokens", type=int, default=4 if common.QUICK else 16)
    p.add_argument("--passes", type=int, default=common.reps(3), help="chats (fresh conversations)")
    p.add_argument(
        "--reprefill-every",
        type=int,
        default=0,
        help="re-prefill on turn 1, every N-th and the last (default: every turn, or every 3rd "
        "turn and in the first pass only if the model runs quantized)",
    )
    args = p.parse_args(argv)
    asyncio.run(main_async(args))
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
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


def section(d, res):
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
        f"A {p['turns']}-turn chat on the starter model ({model_label(d)}; short questions, greedy replies of "
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


def headline(d, res):
    s = d["summary"]
    return [
        [
            "Chinwag last-turn TTFT / first-turn (goal ≤ 1.5)",
            f"**{s['chinwag_last_over_first']:.2f}**",
            f"{f(s['chinwag_first_ttft_s'])} → {f(s['chinwag_last_ttft_s'])} s",
        ],
        [
            "last turn: re-prefill / Chinwag",
            f"{s['last_turn_reprefill_over_chinwag']:.1f}",
            f"{s['last_turn']['chinwag']['prompt_tokens']} history tokens",
        ],
        [
            "last turn: mlx-lm prompt cache / Chinwag",
            f"{s['last_turn_mlx_lm_over_chinwag']:.2f}",
            "below 1: mlx-lm faster",
        ],
    ]


FIGURE = Figure(name="followup", title="Follow-up turns", section=section, plot=plot, headline=headline)


if __name__ == "__main__":
    main()
