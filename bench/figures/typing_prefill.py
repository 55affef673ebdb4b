"""Prefill while typing: Enter-to-first-token for a long message, with and without reading it ahead.

A chat on the starter model (a system prompt and one earlier exchange, cached), then a new
user message of 50, 400 or 2,000 tokens (a paste), two ways, interleaved, in fresh
conversations each repetition:

  typed ahead   the window's typing pause: `await engine.prefill(conv, messages + [draft])`
                reads the draft in the background (not timed: the user is still typing),
                then Enter sends the same messages
  cold          Enter sends the message with nothing read ahead (the previous behaviour)

Timed from the caller: from Enter (the `chat` call) to the first generated token. Greedy
replies must be identical both ways.

--changes measures the second part instead (bench/history_changes.py): a history that changed
under the chat (Fork from Here, a new system prompt, a model switch), read ahead or on Enter;
it writes bench/results/typing_prefill_changes.json.

    python -m bench.figures.typing_prefill [--sizes 50,400,2000] [--reps 3] [--reply-tokens 8]
    python -m bench.figures.typing_prefill --changes [--history-tokens 1500] [--reps 3]
"""

import argparse
import asyncio
import random
import time
import uuid

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, timed_chat
from bench.reporting import COLORS, Figure, Run, f, model_label, pyplot, table
from engine.models.folders import STARTER_ID

SYSTEM = "You are a helpful assistant. Answer briefly."
HISTORY = [
    ("user", "Hi! I will paste some notes and ask about them."),
    ("assistant", None),
]  # the reply is generated once per conversation
QUESTION = "\n\nWhat is the main topic of these notes?"
GOAL_SIZE, GOAL_RATIO = 400, 5.0


def notes_text(tokenizer, n_tokens: int, seed: int = 0) -> str:
    """Plain English notes about n_tokens long (cut on the starter's tokenizer), then a question."""
    rng = random.Random(seed)
    topics = [
        "the budget",
        "the garden",
        "the new library",
        "the bus timetable",
        "the school fair",
        "the river path",
        "the bakery",
        "the town hall roof",
        "the football club",
        "the museum",
    ]
    days = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]
    sentences, ids = [], []
    while len(ids) < n_tokens + 16:
        sentences.append(
            f"Note {len(sentences) + 1}: the meeting about {rng.choice(topics)} moved to "
            f"{rng.choice(days)}, and {rng.randint(2, 40)} people said they would come."
        )
        ids = tokenizer.encode(" ".join(sentences), add_special_tokens=False)
    question_ids = tokenizer.encode(QUESTION, add_special_tokens=False)
    body = tokenizer.decode(ids[: max(1, n_tokens - len(question_ids))])
    return body + QUESTION


async def one(engine, size, text, ahead: bool, reply_tokens: int):
    from engine import GenerationParams

    params = GenerationParams(temperature=0.0, max_tokens=reply_tokens)
    conv = f"typing-{size}-{'ahead' if ahead else 'cold'}-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": HISTORY[0][1]}]
    _, reply, _ = await timed_chat(engine, conv, messages, params)  # the earlier exchange, cached
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": text}]
    await engine.wait_background()  # the previous turn's idle work, if any
    read = None
    if ahead:
        t0 = time.perf_counter()
        read = await engine.prefill(conv, messages, params)
        read_s = time.perf_counter() - t0
    ttft, text_out, stats = await timed_chat(engine, conv, messages, params)
    await engine.forget(conv)
    row = {
        "ttft_s": ttft,
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "reply": text_out,
        "reply_ids": list(stats.reply_ids),
        "prompt_ids_len": len(stats.prompt_ids),
    }
    if read is not None:
        row.update({"read_ahead_s": read_s, "read_ahead_tokens": read.computed_tokens, "read_finished": read.finished})
    return row


async def main_async(args):
    from transformers import AutoTokenizer

    from engine import Engine
    from engine.local import loading

    started = time.perf_counter()
    path = common.starter_path()
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    engine = Engine()
    await engine.load_model(STARTER_ID)
    model, _ = loading.load(path)
    from bench.figures.decode import describe

    info = describe(model)
    del model
    texts = {size: notes_text(tokenizer, size, seed=size) for size in args.sizes}
    raw = {size: {"ahead": [], "cold": []} for size in args.sizes}
    try:
        await one(engine, 0, texts[args.sizes[0]], True, args.reply_tokens)  # warm-up, not counted
        for rep in range(args.reps):
            for size in args.sizes:
                order = (True, False) if (rep + size) % 2 == 0 else (False, True)
                for ahead in order:
                    row = await one(engine, size, texts[size], ahead, args.reply_tokens)
                    raw[size]["ahead" if ahead else "cold"].append(row)
                    log(
                        f"{size} tokens, {'ahead' if ahead else 'cold'}: TTFT {row['ttft_s']:.3f} s, "
                        f"prefilled {row['prefilled_tokens']} of {row['prompt_tokens']}"
                    )
    finally:
        await engine.close()
    rows = []
    for size in args.sizes:
        a, c = raw[size]["ahead"], raw[size]["cold"]
        same = all(x["reply_ids"] == a[0]["reply_ids"] for x in a + c)
        rows.append(
            {
                "size": size,
                "message_tokens": c[0]["prompt_tokens"] - c[0]["reused_tokens"],
                "prompt_tokens": c[0]["prompt_tokens"],
                "ahead_ttft_s": median([x["ttft_s"] for x in a]),
                "cold_ttft_s": median([x["ttft_s"] for x in c]),
                "ahead_ttft_each_s": [x["ttft_s"] for x in a],
                "cold_ttft_each_s": [x["ttft_s"] for x in c],
                "ahead_prefilled_tokens": median([x["prefilled_tokens"] for x in a]),
                "cold_prefilled_tokens": median([x["prefilled_tokens"] for x in c]),
                "read_ahead_s": median([x["read_ahead_s"] for x in a]),
                "identical_replies": same,
            }
        )
        rows[-1]["speedup"] = rows[-1]["cold_ttft_s"] / rows[-1]["ahead_ttft_s"]
    goal = next((r for r in rows if r["size"] == GOAL_SIZE), None)
    summary = {
        "goal_size": GOAL_SIZE,
        "goal_ratio": GOAL_RATIO,
        "goal_speedup": goal["speedup"] if goal else None,
        "goal_met": bool(goal and goal["speedup"] >= GOAL_RATIO),
        "identical_replies": all(r["identical_replies"] for r in rows),
    }
    for r in rows:
        log(
            f"{r['size']}: cold {r['cold_ttft_s']:.3f} s, ahead {r['ahead_ttft_s']:.3f} s, {r['speedup']:.1f}x, "
            f"identical replies {r['identical_replies']}"
        )
    for size in raw:
        for side in raw[size].values():
            for x in side:
                x.pop("reply_ids")
    common.save(
        "typing_prefill",
        {
            "params": {"sizes": args.sizes, "reps": args.reps, "reply_tokens": args.reply_tokens},
            "model": info,
            "rows": rows,
            "raw": raw,
            "summary": summary,
        },
        f"python -m bench.figures.typing_prefill --sizes {','.join(map(str, args.sizes))} --reps {args.reps} "
        f"--reply-tokens {args.reply_tokens}",
        started,
    )


async def changes_async(args):
    from transformers import AutoTokenizer

    from bench import history_changes
    from engine import Engine, GenerationParams
    from engine.models import registry

    started = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(str(common.starter_path()))
    notes = notes_text(tokenizer, args.history_tokens, seed=args.history_tokens)
    params = GenerationParams(temperature=0.0, max_tokens=args.reply_tokens)
    engine = Engine()
    await engine.load_model(registry.STARTER_ID)
    try:
        rows, raw = await history_changes.measure(engine, notes, args.reps, params)
    finally:
        await engine.close()
    for r in rows:
        log(f"{r['kind']}: cold {r['cold_ttft_s']:.3f} s, ahead {r['ahead_ttft_s']:.3f} s, {r['speedup']:.1f}x")
    common.save(
        "typing_prefill_changes",
        {
            "params": {"history_tokens": args.history_tokens, "reps": args.reps, "reply_tokens": args.reply_tokens},
            "rows": rows,
            "raw": raw,
        },
        f"python -m bench.figures.typing_prefill --changes --history-tokens {args.history_tokens} "
        f"--reps {args.reps} --reply-tokens {args.reply_tokens}",
        started,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        default=[50, 400] if common.QUICK else [50, 400, 2000],
    )
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--reply-tokens", type=int, default=8)
    p.add_argument("--changes", action="store_true", help="a changed history: fork, system prompt, model switch")
    p.add_argument("--history-tokens", type=int, default=300 if common.QUICK else 1500)
    args = p.parse_args(argv)
    asyncio.run(changes_async(args) if args.changes else main_async(args))
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
    rows = d["rows"]
    changes = res.get(CHANGES)
    if changes is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    else:
        fig, (ax, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [len(rows), 3]})
        plot_changes(right, changes)
    _bars(
        ax,
        rows,
        ("Enter with nothing read ahead", "read while typing (engine.prefill)"),
        [f"{r['message_tokens']:,}-token message" for r in rows],
    )
    ax.set_title(f"Prefill while typing, starter model ({model_label(d)})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_changes(ax, changes):
    """The second panel: a changed history, re-read on Enter or read ahead."""
    rows = changes["rows"]
    labels = ("re-read on Enter", "read ahead (engine.fork / engine.prefill)")
    _bars(ax, rows, labels, [r["kind"] for r in rows])
    ax.set_title(f"A changed {rows[0]['prompt_tokens']:,}-token chat")
    ax.legend(fontsize=8)


def _bars(ax, rows, labels, ticks):
    """Each row's time to first token without and with reading ahead, its speed-up above (log scale)."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    xs = list(range(len(rows)))
    width = 0.38
    for offset, key, color, label in zip(
        (-width / 2, width / 2), ("cold_ttft_s", "ahead_ttft_s"), (COLORS["reprefill"], COLORS["chinwag"]), labels
    ):
        ax.bar([x + offset for x in xs], [r[key] for r in rows], width, color=color, label=label)
    for x, r in zip(xs, rows):
        ax.annotate(f"{r['speedup']:.0f}x", (x + width / 2, r["ahead_ttft_s"]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, ticks)
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("Enter to first token, s (log)")


def _timings(r) -> list:
    """A row's cells both tables share: prompt tokens, the two times, the speed-up, what Enter read, the read ahead."""
    return [
        f"{r['prompt_tokens']:,}",
        f(r["cold_ttft_s"], 3),
        f(r["ahead_ttft_s"], 3),
        f"**{r['speedup']:.1f}x**",
        f"{r['cold_prefilled_tokens']:.0f} / {r['ahead_prefilled_tokens']:.0f}",
        f(r["read_ahead_s"]),
    ]


def section(d, res):
    rows, s, p = d["rows"], d["summary"], d["params"]
    table_rows = [
        [f"{r['message_tokens']:,}", *_timings(r), "yes" if r["identical_replies"] else "**no**"] for r in rows
    ]
    goal = s.get("goal_speedup")
    return [
        f"A chat on the starter model ({model_label(d)}): a system prompt and one earlier exchange, cached; then a "
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
        "",
        *changes_section(res.get(CHANGES)),
    ]


def changes_section(c) -> list[str]:
    """The second part: a history changed under the chat, re-read on Enter or read ahead."""
    if c is None:
        return [
            "A changed history (fork, system prompt, model switch): not measured yet: "
            "`python -m bench.figures.typing_prefill --changes`."
        ]
    p = c["params"]
    rows = [
        [
            r["kind"],
            *_timings(r),
            ("yes" if r["identical_replies"] else "**no**") + ("" if r["same_prompt"] else " (other prompt ids)"),
        ]
        for r in c["rows"]
    ]
    return [
        f"**A changed history** (the right panel): a system prompt, a first message of about "
        f"{p['history_tokens']:,} tokens and its reply, cached; then the chat changes under the user. **Fork**: Fork "
        "from Here at the user's second message (the parent went on past it), then Generate Reply; read ahead, "
        "`engine.fork` copies the parent's cache up to the fork point. **System prompt**: Chat Settings › a preset › "
        "OK, then a question; read ahead, `engine.prefill(conv, messages)` reads the chat under the new instructions "
        "the moment they are accepted. **Model switch**: the only model here is the starter, so the switch is the "
        "starter loaded again with this chat's saved cache dropped (the new model has no cache of the chat); read "
        "ahead, `engine.prefill` once it is loaded. Cold: Enter re-reads the chat, the previous behaviour. Timed "
        f"from the `chat` call to the first token; greedy replies of {p['reply_tokens']} tokens; "
        f"{p['reps']} repetition{'s' if p['reps'] != 1 else ''} in fresh conversations, the two sides interleaved; "
        "medians.",
        "",
        table(
            [
                "change",
                "prompt tokens",
                "re-read on Enter s",
                "read ahead s",
                "speed-up",
                "prefilled on Enter (cold / ahead)",
                "read-ahead time s",
                "identical replies",
            ],
            rows,
        ),
        "",
        "Exactness is unchanged: the re-read still happens, before Enter instead of after it, and the next prompt's "
        "ids are the ones the cache then holds. A fork read cold re-tokenizes its replies' text, which may give "
        'other ids than the ones the model generated (marked "other prompt ids"); the copy keeps the generated ids.',
    ]


CHANGES = "typing_prefill_changes"
FIGURE = Figure(
    name="typing_prefill",
    title="Prefill while typing",
    section=section,
    plot=plot,
    extra_runs=(Run(CHANGES, ("--changes",), "A changed history"),),
)


if __name__ == "__main__":
    main()
