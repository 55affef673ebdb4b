"""Prompt-lookup speculative decoding on edits the benchmark did not choose (issue 15, section 3).

The task set below was written and committed before the drafter was tuned for edits, so the
figure measures held-out text, not the cases the drafter was shaped on. Four edits of a short
Python function given in the prompt, each asking for the whole function back:

  e_rename     rename one variable everywhere
  e_bugfix     fix an off-by-one bug that a test shows
  e_translate  translate French comments into English
  e_reformat   reformat cramped 2-space code to PEP 8

and two free chats that repeat nothing from their prompt (where speculation must not slow
decoding down). The starter model (SmolLM2-135M, as the engine loads it), greedy; Chinwag's
Engine with speculation off (plain decoding) and on, interleaved, the order alternating every
repetition. Decode tok/s is timed from the caller: (tokens - 1) / (last - first token's arrival).

    python -m bench.figures.speculative_edits [--reps 3] [--cases e_rename,...]
"""

import argparse
import asyncio
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, ratio
from bench.figures.speculative import CASES as FIGURE_7_CASES
from bench.figures.speculative import run_chinwag, summarise_case
from bench.reporting import COLORS, Figure, f, pyplot, table

SIDES = ["off", "on"]
COST_SIZES = list(range(1, 18))  # tokens fed in one pass: the pending token and a draft of up to 16
EDIT_TOKENS = 128
CHAT_TOKENS = 96
# The goals of issue 15: edits at least 2x plain decoding, free chat never below 1.0x.
EDIT_GOAL, CHAT_GOAL = 2.0, 1.0

RENAME = '''def summarize_orders(orders, tax_rate):
    """Return the number of paid orders and their total with tax."""
    total = 0.0
    count = 0
    for order in orders:
        if order.get("status") != "paid":
            continue
        amount = float(order["amount"])
        if amount < 0:
            raise ValueError(f"negative amount in order {order['id']}")
        total += amount
        count += 1
    total = total * (1 + tax_rate)
    return count, round(total, 2)
'''

BUGFIX = '''def moving_average(values, window):
    """Average of each run of `window` consecutive values."""
    if window <= 0:
        raise ValueError("window must be positive")
    averages = []
    for start in range(len(values) - window):
        chunk = values[start:start + window]
        averages.append(sum(chunk) / window)
    return averages


def test_moving_average():
    assert moving_average([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
'''

TRANSLATE = """def read_inventory(path):
    # Ouvre le fichier et lit chaque ligne
    items = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            # Ignore les lignes vides et les commentaires
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            # Chaque ligne contient un nom et une quantité
            name, quantity = line.split(",")
            items[name.strip()] = int(quantity)
    # Renvoie le dictionnaire des articles
    return items
"""

REFORMAT = """def clamp_scores(scores,low=0,high=100):
  result=[]
  for name,score in scores.items():
    if score<low:
      score=low
    elif score>high:
      score=high
    result.append((name,score))
  result.sort(key=lambda pair:pair[1],reverse=True)
  return result
"""


def _edit(code: str, request: str) -> list:
    return [{"role": "user", "content": "Here is some Python code:\n\n```python\n" + code + "```\n\n" + request}]


# case -> (messages, max_tokens, kind)
CASES = {
    "e_rename": (
        _edit(
            RENAME,
            "Rename the variable total to gross_amount everywhere in this function and write out the whole "
            "function again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "e_bugfix": (
        _edit(
            BUGFIX,
            "The test fails: the last average is missing. Fix the bug and write out the whole code again, "
            "with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "e_translate": (
        _edit(
            TRANSLATE,
            "Translate the French comments in this function into English and write out the whole function "
            "again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "e_reformat": (
        _edit(
            REFORMAT,
            "Reformat this function to PEP 8 (4-space indentation, spaces around operators and after commas) "
            "and write out the whole function again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "f_story": (FIGURE_7_CASES["c_chat"][0], CHAT_TOKENS, "chat"),
    "f_explain": (
        [
            {
                "role": "user",
                "content": "Explain how the gears on a bicycle work, as you would to a ten-year-old, with an "
                "example of when to change gear.",
            }
        ],
        CHAT_TOKENS,
        "chat",
    ),
}


# The tuning set: the drafting constants in engine/local/speculative.py (FIRST_PRIOR, MORE_PRIOR,
# LEARN_RATE) were chosen on these replies, never on CASES above. Not in the figure; measure
# them with --cases t_rename,...
T_COUNT = '''def count_words(text, min_length):
    """Count the words of at least min_length letters."""
    counts = {}
    for raw in text.split():
        word = raw.strip(".,;:!?").lower()
        if len(word) < min_length:
            continue
        counts[word] = counts.get(word, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: kv[1], reverse=True)
    return ranked
'''
T_STACK = """class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from an empty stack")
        return self.items.pop(0)

    def peek(self):
        return self.items[-1]
"""
T_CONFIG = """def parse_config(lines):
    # Lit les paires cle=valeur
    config = {}
    for number, line in enumerate(lines, 1):
        # Saute les lignes vides
        if not line.strip():
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected key=value")
        # Separe la cle et la valeur
        key, value = line.split("=", 1)
        config[key.strip()] = value.strip()
    return config
"""
T_MERGE = """def merge_ranges(ranges):
  ranges=sorted(ranges)
  merged=[]
  for start,end in ranges:
    if merged and start<=merged[-1][1]:
      merged[-1]=(merged[-1][0],max(merged[-1][1],end))
    else:
      merged.append((start,end))
  return merged
"""

TUNING_CASES = {
    "t_rename": (
        _edit(
            T_COUNT,
            "Rename the variable counts to frequencies everywhere in this function and write out the whole "
            "function again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "t_bugfix": (
        _edit(
            T_STACK,
            "pop() removes the wrong item: a stack pops its last item. Fix the bug and write out the whole "
            "class again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "t_translate": (
        _edit(
            T_CONFIG,
            "Translate the French comments in this function into English and write out the whole function "
            "again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "t_reformat": (
        _edit(
            T_MERGE,
            "Reformat this function to PEP 8 (4-space indentation, spaces around operators and after "
            "commas) and write out the whole function again, with no explanation.",
        ),
        EDIT_TOKENS,
        "edit",
    ),
    "t_letter": (
        [{"role": "user", "content": "Write a short letter to a friend about a trip to the mountains."}],
        CHAT_TOKENS,
        "chat",
    ),
    "t_habits": (
        [{"role": "user", "content": "What are three good habits for staying healthy? Explain each briefly."}],
        CHAT_TOKENS,
        "chat",
    ),
    "t_notes": (
        [
            {
                "role": "user",
                "content": "Here are my notes:\n\nThe meeting moved to Thursday at 3 pm. Anna will bring the budget "
                "figures for the second quarter. Tom is out until the 14th, so Priya covers the supplier calls. The "
                "launch date stays on the 28th unless the printer is late again.\n\nSummarize these notes as a list "
                "of action items, quoting names and dates exactly.",
            }
        ],
        CHAT_TOKENS,
        "chat",
    ),
}
ALL_CASES = {**CASES, **TUNING_CASES}


def verify_costs(model, prompt_ids, reps):
    """Seconds of one forward pass of n tokens after the prompt, relative to n = 1 (median, interleaved)."""
    import mlx.core as mx

    from engine.context.conversation import ConversationCache

    conv = ConversationCache.create(model, 1024)
    mx.eval(model(mx.array(prompt_ids)[None], cache=conv.layers))
    conv.token_ids = list(prompt_ids)
    times = {n: [] for n in COST_SIZES}
    for _ in range(max(5, 3 * reps)):
        for n in COST_SIZES:
            started = time.perf_counter()
            mx.eval(mx.argmax(model(mx.array(prompt_ids[:n])[None], cache=conv.layers)[0], axis=-1))
            times[n].append(time.perf_counter() - started)
            conv.repair()
    return {n: median(ts) / median(times[1]) for n, ts in times.items()}


def best_schedule(prompt_ids, reply_ids, costs, tokenizer):
    """The speedup of the best schedule of lookup drafts, chosen knowing the reply: an upper bound.

    At each token, a plain step (cost 1) or a draft of k copied tokens (cost costs[k + 1],
    interpolated) from the token or the text lookup, accepted as far as it matches the reply."""
    from engine.local.prompt_lookup import PromptLookup
    from engine.local.speculative import MAX_COPY
    from engine.local.text_lookup import TextLookup

    lookups = PromptLookup(list(prompt_ids)), TextLookup(tokenizer, list(prompt_ids))
    matched = []
    for i, tok in enumerate(reply_ids):
        longest = 0
        for lookup in lookups:
            lookup.extend([tok])
            draft, n = lookup.propose(MAX_COPY), 0
            while n < len(draft) and i + 1 + n < len(reply_ids) and draft[n] == reply_ids[i + 1 + n]:
                n += 1
            longest = max(longest, n)
        matched.append(longest)
    sizes = sorted(costs)

    def cost(fed):
        hi = next(s for s in sizes if s >= fed) if fed <= sizes[-1] else sizes[-1]
        lo = max(s for s in sizes if s <= fed)
        w = 0 if hi == lo else (fed - lo) / (hi - lo)
        return costs[lo] + w * (costs[hi] - costs[lo])

    total = len(reply_ids)
    best = [0.0] * (total + 1)
    for i in range(total - 1, -1, -1):
        best[i] = 1 + best[i + 1]
        for k in range(1, MAX_COPY + 1):
            best[i] = min(best[i], cost(k + 1) + best[min(total, i + 1 + min(k, matched[i]))])
    return total / best[0] if total else 1.0


async def measure(cases, reps):
    from engine import Engine
    from engine.local import loading

    path = common.starter_path()
    engine = Engine()
    await engine.load_model(str(path))
    model, tokenizer = loading.load(path)  # for the pass costs, and the replies' first words in the report
    log("starter: warm-up")
    warm = [{"role": "user", "content": "Hello"}]
    await run_chinwag(engine, warm, 4, False)
    await run_chinwag(engine, warm, 4, True)
    log("starter: verification pass costs")
    first_prompt = tokenizer.apply_chat_template(ALL_CASES[cases[0]][0], add_generation_prompt=True)
    costs = verify_costs(model, list(first_prompt), reps)
    log("costs: " + ", ".join(f"{n}: {c:.2f}" for n, c in costs.items()))
    out = {}
    for case in cases:
        messages, max_tokens, kind = ALL_CASES[case]
        max_tokens = 24 if common.QUICK else max_tokens
        runs = {side: [] for side in SIDES}
        for rep in range(reps):
            for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
                r = await run_chinwag(engine, messages, max_tokens, side == "on")
                r["rep"] = rep
                runs[side].append(r)
                log(
                    f"{case} rep {rep} {side}: {r['decode_tps']:.2f} tok/s, {r['tokens']} tokens"
                    + (f", accepted {r['accepted']}/{r['drafted']}" if side == "on" else "")
                )
        summary, ids = summarise_case(runs, tokenizer)
        out[case] = {
            **summary,
            "kind": kind,
            "per_rep_on_over_off": [ratio(a["decode_tps"], b["decode_tps"]) for a, b in zip(runs["on"], runs["off"])],
            "best_schedule": best_schedule(
                tokenizer.apply_chat_template(messages, add_generation_prompt=True), ids, costs, tokenizer
            ),
        }
        log(f"{case}: on/off {out[case]['on_over_off']:.2f}, same ids {summary['same_ids']}")
    await engine.close()
    return out, {str(n): c for n, c in costs.items()}


async def main_async(args):
    started = time.perf_counter()
    common.temp_home()
    cases = [c for c in args.cases.split(",") if c]
    results, costs = await measure(cases, args.reps)
    common.save(
        "speculative_edits",
        {
            "params": {"reps": args.reps, "cases": cases, "max_tokens": {c: ALL_CASES[c][1] for c in cases}},
            "results": results,
            "costs": costs,
        },
        f"python -m bench.figures.speculative_edits --reps {args.reps}",
        started,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--cases", default=",".join(CASES))
    args = p.parse_args(argv)
    asyncio.run(main_async(args))
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


LABELS = {
    "e_rename": "rename a variable",
    "e_bugfix": "fix a bug",
    "e_translate": "translate comments",
    "e_reformat": "reformat",
    "f_story": "free chat: a story",
    "f_explain": "free chat: explain",
}


def _kind_median(res, kind):
    return median([r["on_over_off"] for r in res.values() if r["kind"] == kind])


def plot(d, res, path):
    plt = pyplot()
    res = d["results"]
    cases = list(res)
    fig, ax = plt.subplots(figsize=(2 + 1.4 * len(cases), 4.2))
    width = 0.38
    for j, (side, label, color) in enumerate(
        [("off", "speculation off (plain decoding)", "#aec7e8"), ("on", "prompt lookup", COLORS["chinwag"])]
    ):
        xs = [i + (j - 0.5) * width for i in range(len(cases))]
        ax.bar(xs, [res[c]["decode_tps"][side] for c in cases], width, color=color, label=label)
        for x, c in zip(xs, cases):
            pts = [r["decode_tps"] for r in res[c]["runs"][side]]
            ax.scatter([x] * len(pts), pts, color="k", s=6, zorder=3)
    ax.set_xticks(
        range(len(cases)), [f"{LABELS.get(c, c)}\n{res[c]['on_over_off']:.2f}x plain" for c in cases], fontsize=8
    )
    ax.set_ylabel("decode tokens/s (median; dots: repetitions)")
    ax.set_title("starter model, greedy: held-out edits and free chat")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _one_line(text: str) -> str:
    """A reply's start as plain text inside a paragraph (no fences, no line breaks)."""
    return text[:90].strip().replace("`", "'").replace("\n", " ⏎ ")


def section(d, res):
    res = d["results"]
    rows = []
    for case, r in res.items():
        t = r["decode_tps"]
        rows.append(
            [
                LABELS.get(case, case),
                r["prompt_tokens"],
                r["tokens"],
                f(t["off"]),
                f(t["on"]),
                f"**{r['on_over_off']:.2f}x**",
                ", ".join(f(x) for x in r["per_rep_on_over_off"]),
                f"{r['accepted']}/{r['drafted']} ({f(100 * r['acceptance'], 0)}%)" if r["drafted"] else "0/0",
                "yes" if r["same_ids"] else "**no**",
                f"{r['best_schedule']:.2f}x" if "best_schedule" in r else "",
            ]
        )
    goals = []
    for kind, goal, words in (("edit", EDIT_GOAL, "edits"), ("chat", CHAT_GOAL, "free chat")):
        got = [r["on_over_off"] for r in res.values() if r["kind"] == kind]
        if got:
            goals.append(
                f"{words} goal ≥ {goal}x plain decoding: median **{_kind_median(res, kind):.2f}x**, lowest "
                f"{min(got):.2f}x, " + ("met" if min(got) >= goal else "not met by every case")
            )
    return [
        "Edits the drafter was not tuned on (the task set was committed before the drafter changed; its constants "
        "were chosen on another set, `TUNING_CASES` in `bench/figures/speculative_edits.py`): a short Python "
        "function in the prompt, rewritten whole with one "
        "change (a variable renamed, an off-by-one bug fixed, French comments translated, cramped code reformatted "
        "to PEP 8), and two free chats that repeat nothing from their prompt. One exception: the text lookup "
        "(`engine/local/text_lookup.py`, 2026-12-02) was written for the way this figure's reformat failed (its "
        "tokens differ from the source's only by spacing), and its two constants were chosen on the tuning set "
        "and this figure's story, so the reformat row no longer measures a drafter that never saw it. "
        "Likewise, the rule that a replacement is remembered only after two tokens back in step (`SYNC` in "
        "`engine/local/speculative.py`, 2026-12-02) came from reading this figure's rename reply; an A/B run of "
        "that change, interleaved on another machine (plain decoding 13.8 tok/s), gave rename 1.87x → 1.91x, "
        "translate 2.17x → 2.20x, bug fix 2.29x → 2.48x, reformat 1.99x → 1.96x, the chats unchanged, and on "
        "the tuning set changes within noise. Since e6c2b6b, a greedy pass no longer normalises its rows' "
        "logits (13.6 ms of a 17-token pass's 135 ms here; a plain step saves 3.3 ms of 64, so the ratio moves "
        "less than either). "
        "Starter model, greedy, "
        f"{d['params']['reps']} repetitions, speculation off and on interleaved (the order alternating); "
        f"edits up to {EDIT_TOKENS} tokens, chats {CHAT_TOKENS}; decode tok/s from the caller, "
        "(tokens − 1) / (last − first token).",
        "",
        table(
            [
                "case",
                "prompt",
                "tokens",
                "off tok/s",
                "on tok/s",
                "on / off",
                "on / off per repetition",
                "accepted / drafted",
                "same ids",
                "best schedule",
            ],
            rows,
        ),
        "",
        ("; ".join(goals) + ".") if goals else "",
        "",
        *_cost_lines(d),
        "Replies' first words (⏎: a new line): "
        + "; ".join(f"{LABELS.get(c, c)}: “{_one_line(r['reply_start'])}…”" for c, r in res.items())
        + ".",
    ]


def _cost_lines(d):
    costs = d.get("costs")
    if not costs:
        return []
    return [
        "A verification pass feeds the pending token and the draft at once. On this machine one pass of n "
        "tokens costs, in plain steps, timed alone (not linear in n: the drafter times each size on its own): "
        + ", ".join(f"{n}: {c:.2f}" for n, c in costs.items())
        + ". Inside a reply a pass also costs the pipelining it breaks (the step after it overlaps nothing), "
        "which the drafter counts and this table does not. *Best schedule* is the speedup of the best choice "
        "of plain steps and drafts of either lookup (token or text) made knowing the reply in advance, at these "
        "costs: no drafting policy "
        "on these copies can pass it.",
        "",
    ]


def headline(d, res):
    res = d["results"]
    return [
        [
            "speculative decoding on held-out edits, on / off",
            f"{_kind_median(res, 'edit'):.2f}x",
            f"free chat {_kind_median(res, 'chat'):.2f}x; starter model, greedy, identical ids",
        ]
    ]


FIGURE = Figure(
    name="speculative_edits",
    title="Speculative decoding on held-out edits",
    section=section,
    plot=plot,
    headline=headline,
)


if __name__ == "__main__":
    main()
