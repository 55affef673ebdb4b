"""Long chats past the context window, fit() at 1,000 turns, and a restart.

Four parts, one result file (bench/results/longchat.json):

  policy   the window policy alone (the starter's tokenizer, fixed replies, no model): prefilled
           tokens per turn past the limit for low-water marks 0.25 … 1.0 (1.0 is the previous
           exact-fit policy: drop one turn, re-prefill the window, every turn). Cheap, so it runs
           at full size (300 turns, context cap 1,024); it is what picked DEFAULT_LOW_WATER.
  chat     the starter model, greedy, scripted short turns, interleaved turn by turn:
             chinwag    the window sliding to the default low-water mark
             exact-fit  the previous policy (low_water=1.0)
             mlx-lm     mlx-lm's RotatingKVCache (make_prompt_cache(max_kv_size=cap)), the
                        rolling-context anchor: only new tokens, but the old ones are overwritten
           prefilled tokens and TTFT per turn; median TTFT of the last 50 turns over turns 2–10.
  fit      plan_window() on the starter's tokenizer at 50, 200 and 1,000 turns: the first call
           (nothing remembered) and a steady-state turn.
  restart  the first follow-up's TTFT after Engine.close() and a new Engine, with the saved
           cache and without it (kv/ deleted), for a chat of about --restart-tokens tokens.

    python -m bench.figures.longchat [--turns 300] [--cap 1024] [--reply-tokens 16] [--restart-tokens 2000]
"""

import argparse
import asyncio
import shutil
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median
from bench.reporting import COLORS, Figure, f, pyplot, table
from engine.models.folders import STARTER_ID

SYSTEM = "You are a helpful assistant. Answer in one short sentence."
TOPICS = [
    "cats",
    "rivers",
    "bread",
    "music",
    "trains",
    "stars",
    "gardens",
    "chess",
    "rain",
    "maps",
    "bees",
    "clocks",
    "ships",
    "tea",
    "snow",
    "paper",
    "bridges",
    "salt",
    "owls",
    "glass",
]


def question(i: int) -> str:
    return f"Tell me one fact about {TOPICS[i % len(TOPICS)]} (question {i + 1})."


def policy(tokenizer, turns, cap, reply_tokens, low_waters):
    """Simulated turns on the planner: prefilled tokens per turn for each low-water mark."""
    from engine.context.conversation import common_prefix
    from engine.context.policy import plan_window, reply_room
    from engine.context.prompt import History

    room = reply_room(reply_tokens, cap)
    eos = set(tokenizer.eos_token_ids)
    reply_ids = tokenizer.encode(
        "It is a short fact about that topic, told in one sentence.", add_special_tokens=False
    )[:reply_tokens]
    reply = tokenizer.decode(reply_ids)
    out = {}
    for lw in low_waters:
        history, messages, cache, rows = History(), [{"role": "system", "content": SYSTEM}], [], []
        for i in range(turns):
            messages.append({"role": "user", "content": question(i)})
            plan = plan_window(tokenizer, messages, history, cap, room, lw)
            history.start = plan.start
            reused = common_prefix(cache, plan.prompt_ids)
            history.record_reply(len(messages), plan.prompt.tail, plan.prompt.tail_ids, reply, reply_ids, eos)
            cache = plan.prompt_ids + list(reply_ids)
            rows.append(
                {
                    "turn": i + 1,
                    "prompt": len(plan.prompt_ids),
                    "prefilled": len(plan.prompt_ids) - reused,
                    "dropped": plan.dropped,
                    "slid": plan.slid,
                }
            )
            messages.append({"role": "assistant", "content": reply})
        first_slide = next((r["turn"] for r in rows if r["slid"]), turns)
        past = [r for r in rows if r["turn"] >= first_slide]
        steady = median([r["prefilled"] for r in rows[1 : first_slide - 1]])
        out[str(lw)] = {
            "rows": rows,
            "first_slide": first_slide,
            "steady_new_tokens": steady,
            "mean_prefilled_past_limit": sum(r["prefilled"] for r in past) / max(1, len(past)),
            "ratio": sum(r["prefilled"] for r in past) / max(1, len(past)) / steady,
            "mean_prompt_past_limit": sum(r["prompt"] for r in past) / max(1, len(past)),
        }
        log(
            f"policy low-water {lw}: first slide at turn {first_slide}, prefilled/turn past the limit "
            f"{out[str(lw)]['mean_prefilled_past_limit']:.1f} = {out[str(lw)]['ratio']:.2f}x the new tokens"
        )
    return out


def fit_times(tokenizer, sizes, cap=512, room=64):
    from engine.context.policy import plan_window
    from engine.context.prompt import History

    rows = []
    for n in sizes:
        messages = [{"role": "system", "content": SYSTEM}]
        for i in range(n):
            messages += [{"role": "user", "content": question(i)}, {"role": "assistant", "content": f"Fact {i}."}]
        messages.append({"role": "user", "content": question(n)})
        history = History()
        t = time.perf_counter()
        plan = plan_window(tokenizer, messages, history, cap, room)
        cold = time.perf_counter() - t
        history.start = plan.start
        history.record_reply(len(messages), plan.prompt.tail, plan.prompt.tail_ids, "Fine.", [42], set())
        messages += [{"role": "assistant", "content": "Fine."}, {"role": "user", "content": question(n + 1)}]
        warm = []
        for _ in range(5):
            t = time.perf_counter()
            plan_window(tokenizer, messages, history, cap, room)
            warm.append(time.perf_counter() - t)
        rows.append({"turns": n, "cold_ms": cold * 1000, "turn_ms": median(warm) * 1000})
        log(f"fit at {n} turns: first call {cold * 1000:.1f} ms, a turn {median(warm) * 1000:.2f} ms")
    return rows


class RotatingChat:
    """mlx-lm's rolling context: one RotatingKVCache, fed only each turn's new ids."""

    def __init__(self, model, tokenizer, cap):
        from mlx_lm.models.cache import make_prompt_cache

        from engine.context.prompt import History

        self.model, self.tokenizer = model, tokenizer
        self.cache = make_prompt_cache(model, max_kv_size=cap)
        self.history, self.fed = History(), []

    def turn(self, messages, max_tokens):
        import mlx.core as mx
        from mlx_lm.generate import generate_step

        from engine.context.prompt import build

        t0 = time.perf_counter()
        prompt = build(self.tokenizer, messages, list(range(len(messages))), self.history)
        assert prompt.ids[: len(self.fed)] == self.fed, "the rotating side's history broke"
        new = prompt.ids[len(self.fed) :]
        first, reply = None, []
        for tok, _ in generate_step(mx.array(new), self.model, max_tokens=max_tokens, prompt_cache=self.cache):
            if first is None:
                first = time.perf_counter()
            reply.append(int(tok))
            if int(tok) in self.tokenizer.eos_token_ids:
                break
        eos = set(self.tokenizer.eos_token_ids)
        text = self.tokenizer.decode([t for t in reply if t not in eos])
        self.history.record_reply(len(messages), prompt.tail, prompt.tail_ids, text, reply, eos)
        self.fed = prompt.ids + reply[:-1]  # generate_step has not fed its last token
        return {
            "ttft_s": first - t0,
            "prompt_tokens": len(prompt.ids),
            "prefilled_tokens": len(new),
            "reused_tokens": len(prompt.ids) - len(new),
        }, text


def chat(session, model, tokenizer, turns, cap, reply_tokens):
    from engine import GenerationParams

    sides = {"chinwag": None, "exact_fit": 1.0}
    rows = {k: [] for k in list(sides) + ["mlx_lm"]}
    history = {k: [{"role": "system", "content": SYSTEM}] for k in rows}
    rotating = RotatingChat(model, tokenizer, cap)
    for i in range(turns):
        order = list(rows)
        order = order[i % 3 :] + order[: i % 3]
        for side in order:
            history[side].append({"role": "user", "content": question(i)})
            if side == "mlx_lm":
                r, text = rotating.turn(history[side], reply_tokens)
            else:
                params = GenerationParams(
                    temperature=0.0, max_tokens=reply_tokens, context_cap=cap, low_water=sides[side]
                )
                t0 = time.perf_counter()
                result = session.chat(f"bench-longchat-{side}", history[side], params, lambda: False, lambda d: None)
                stats, text = result.stats, result.text
                r = {
                    "ttft_s": stats.ttft_s,
                    "prompt_tokens": stats.prompt_tokens,
                    "prefilled_tokens": stats.prefilled_tokens,
                    "reused_tokens": stats.reused_tokens,
                    "dropped": stats.dropped_messages,
                    "finish": stats.finish_reason,
                    "wall_to_stats_s": time.perf_counter() - t0,
                }
            r["turn"] = i + 1
            rows[side].append(r)
            history[side].append({"role": "assistant", "content": text})
        log(
            f"turn {i + 1}: "
            + ", ".join(
                f"{s} prefilled {rows[s][-1]['prefilled_tokens']} ttft {rows[s][-1]['ttft_s']:.2f}s" for s in rows
            )
        )
    tail = max(2, turns - min(50, max(5, turns // 4)))  # the last 50 turns (a quarter of a short run)
    summary = {}
    for side, rs in rows.items():
        early = median([r["ttft_s"] for r in rs[1:10]])
        late = median([r["ttft_s"] for r in rs[tail:]])
        summary[side] = {
            "early_ttft_s": early,
            "late_ttft_s": late,
            "late_over_early": late / early,
            "late_turns": [tail + 1, turns],
            "mean_prefilled_late": sum(r["prefilled_tokens"] for r in rs[tail:]) / len(rs[tail:]),
        }
    return rows, summary


async def restart(tokens, reply_tokens):
    from engine import Engine, GenerationParams, TextDelta

    home = common.temp_home()
    params = GenerationParams(temperature=0.0, max_tokens=reply_tokens)
    words = " ".join(f"{TOPICS[i % len(TOPICS)]}" for i in range(int(tokens * 0.9)))
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Read this list: {words}. Done?"}]

    async def one_turn(messages):
        engine = Engine()
        await engine.load_model(STARTER_ID)
        parts, stats = [], None
        async for ev in engine.chat("bench-restart", messages, params):
            if isinstance(ev, TextDelta):
                parts.append(ev.text)
            else:
                stats = ev
        await engine.close()
        return "".join(parts), stats

    text, stats0 = await one_turn(first)
    follow = first + [{"role": "assistant", "content": text}, {"role": "user", "content": "Which came first?"}]
    saved = home / "kv-saved"
    shutil.copytree(home / "kv", saved)
    rows = {}
    for mode in ("saved", "none", "saved"):  # with, without, with again (interleaved against drift)
        shutil.rmtree(home / "kv")
        if mode == "saved":
            shutil.copytree(saved, home / "kv")
        else:
            (home / "kv").mkdir()
        _, stats = await one_turn(follow)
        rows.setdefault(mode, []).append(
            {"ttft_s": stats.ttft_s, "reused_tokens": stats.reused_tokens, "prefilled_tokens": stats.prefilled_tokens}
        )
        log(
            f"restart {mode}: reused {stats.reused_tokens}, prefilled {stats.prefilled_tokens}, "
            f"ttft {stats.ttft_s:.2f}s"
        )
    return {
        "chat_tokens": stats0.prompt_tokens + stats0.generated_tokens,
        "rows": rows,
        "saved_ttft_s": median([r["ttft_s"] for r in rows["saved"]]),
        "none_ttft_s": rows["none"][0]["ttft_s"],
        "speedup": rows["none"][0]["ttft_s"] / median([r["ttft_s"] for r in rows["saved"]]),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=40 if common.QUICK else 300)
    p.add_argument("--cap", type=int, default=256 if common.QUICK else 1024)
    p.add_argument("--reply-tokens", type=int, default=8 if common.QUICK else 16)
    p.add_argument("--policy-turns", type=int, default=300)
    p.add_argument("--policy-cap", type=int, default=1024)
    p.add_argument("--restart-tokens", type=int, default=400 if common.QUICK else 2000)
    p.add_argument("--skip-chat", action="store_true", help="only the policy, fit and restart parts")
    args = p.parse_args(argv)
    started = time.perf_counter()
    common.temp_home()
    from engine.context.policy import DEFAULT_LOW_WATER
    from engine.local import loading
    from engine.local.session import Session

    path = common.starter_path()
    from mlx_lm.utils import load_tokenizer

    tokenizer = load_tokenizer(path)
    low_waters = [0.25, 0.3, 0.35, 0.5, 0.75, 1.0]
    result = {
        "params": {
            "turns": args.turns,
            "cap": args.cap,
            "reply_tokens": args.reply_tokens,
            "policy_turns": args.policy_turns,
            "policy_cap": args.policy_cap,
            "restart_tokens": args.restart_tokens,
            "default_low_water": DEFAULT_LOW_WATER,
        }
    }
    result["policy"] = policy(tokenizer, args.policy_turns, args.policy_cap, args.reply_tokens, low_waters)
    result["fit"] = fit_times(tokenizer, [50, 200, 1000])
    if not args.skip_chat:
        session = Session()
        session.load(STARTER_ID)
        model, tok = session.model, session.tokenizer
        del loading
        result["chat"], result["chat_summary"] = chat(session, model, tok, args.turns, args.cap, args.reply_tokens)
    result["restart"] = asyncio.run(restart(args.restart_tokens, 8))
    common.save(
        "longchat",
        result,
        f"python -m bench.figures.longchat --turns {args.turns} --cap {args.cap} --reply-tokens {args.reply_tokens} "
        f"--restart-tokens {args.restart_tokens}" + (" --skip-chat" if args.skip_chat else ""),
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
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


def section(d, res):
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


FIGURE = Figure(name="longchat", title="Long chats past the window", section=section, plot=plot)


if __name__ == "__main__":
    main()
