"""A long chat past the window with a reader's pause between turns, and without one.

The same scripted chat as figure 9 (starter model, greedy, short turns, a context cap) through
the Engine, twice: once with no pause (every slide of the window is paid on the user's clock)
and once with `--pause` seconds between turns, as a reader would take, during which the engine
prepares the next window in the background (issue 9, point 4). Not interleaved: the two runs
would preempt each other's background work, so they run one after the other.

    python -m bench.figures.longchat_pause [--turns 120] [--cap 512] [--reply-tokens 16] [--pause 1.0]
"""

import argparse
import asyncio
import time

from bench import common
from bench.common import log, median
from bench.figures.longchat import SYSTEM, question
from bench.reporting import COLORS, Figure, f, pyplot, table
from engine.models.folders import STARTER_ID


async def run(turns, cap, reply_tokens, pause):
    from engine import Engine, GenerationParams, TextDelta, TurnStats

    params = GenerationParams(temperature=0.0, max_tokens=reply_tokens, context_cap=cap)
    engine = Engine()
    await engine.load_model(STARTER_ID)
    messages, rows = [{"role": "system", "content": SYSTEM}], []
    try:
        for i in range(turns):
            prepared = 0
            if i and pause:
                await asyncio.sleep(pause)  # the reader reads; the engine may prepare the next window
                done = engine.background_result()
                prepared = done.computed_tokens if done else 0
            messages.append({"role": "user", "content": question(i)})
            parts, stats = [], None
            async for ev in engine.chat("bench-pause", messages, params):
                if isinstance(ev, TextDelta):
                    parts.append(ev.text)
                elif isinstance(ev, TurnStats):
                    stats = ev
            assert stats is not None
            messages.append({"role": "assistant", "content": "".join(parts)})
            rows.append(
                {
                    "turn": i + 1,
                    "ttft_s": stats.ttft_s,
                    "prefilled_tokens": stats.prefilled_tokens,
                    "dropped": stats.dropped_messages,
                    "prepared_tokens": prepared,
                }
            )
            if (i + 1) % 20 == 0:
                log(f"pause {pause}: turn {i + 1}, ttft {stats.ttft_s:.2f}s, prefilled {stats.prefilled_tokens}")
    finally:
        await engine.close()
    return rows


def summary(rows):
    tail = max(2, len(rows) - min(50, max(5, len(rows) // 4)))
    early = median([r["ttft_s"] for r in rows[1:10]])
    late = median([r["ttft_s"] for r in rows[tail:]])
    big = [r for r in rows[1:] if r["prefilled_tokens"] > 100]  # a slide re-read on the user's clock
    return {
        "early_ttft_s": early,
        "late_ttft_s": late,
        "late_over_early": late / early,
        "late_turns": [tail + 1, len(rows)],
        "max_late_ttft_s": max(r["ttft_s"] for r in rows[tail:]),
        "slides_on_users_clock": len(big),
        "prepared_turns": sum(1 for r in rows if r["prepared_tokens"]),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=40 if common.QUICK else 120)
    p.add_argument("--cap", type=int, default=256 if common.QUICK else 512)
    p.add_argument("--reply-tokens", type=int, default=8 if common.QUICK else 16)
    p.add_argument("--pause", type=float, default=1.0)
    args = p.parse_args(argv)
    started = time.perf_counter()
    common.temp_home()
    result = {"params": vars(args), "runs": {}, "summary": {}}
    for name, pause in (("no_pause", 0.0), ("pause", args.pause)):
        rows = asyncio.run(run(args.turns, args.cap, args.reply_tokens, pause))
        result["runs"][name], result["summary"][name] = rows, summary(rows)
        log(f"{name}: {result['summary'][name]}")
    common.save(
        "longchat_pause",
        result,
        f"python -m bench.figures.longchat_pause --turns {args.turns} --cap {args.cap} "
        f"--reply-tokens {args.reply_tokens} --pause {args.pause}",
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
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


def section(d, res):
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


FIGURE = Figure(name="longchat_pause", title="Long chats with a reader's pause", section=section, plot=plot)


if __name__ == "__main__":
    main()
