"""Prompt-lookup speculative decoding, against mlx_lm.stream_generate and speculation off.

Three sides on the same chat-templated prompt ids, greedy, in one process, the order rotating
every repetition: `mlx_lm.stream_generate`, Chinwag's Engine with speculation off, and with it
on. Cases (issue 8):

  a_code     rewrite a ~300-token Python module given in the prompt, with one change
  b_summary  summarise a ~1,000-token document given in the prompt
  c_chat     free-form chat that repeats nothing (the case speculation must not slow down)

on the starter model (SmolLM2-135M, as the engine loads it) and the tests' tiny random model
(which copies nothing: it shows the cost of drafting that never pays off). Decode tok/s is
timed from the caller: (tokens - 1) / (last - first token's arrival).

  d_draft_*  a draft model instead of lookups, on the free-chat prompt. No draft/main pair of
             the starter's family is available offline, so only the tiny model runs it, for the
             mechanics: drafted by a copy of itself (every draft right) and by a second tiny
             model with the same tokenizer and other weights (drafts nearly always wrong).

    python -m bench.figures.speculative [--reps 3] [--models starter,tiny] [--cases a_code,b_summary,c_chat]
"""

import argparse
import asyncio
import time
import uuid

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, ratio
from bench.reporting import COLORS, Figure, f, pyplot, table

SIDES = ["mlx_lm", "off", "on"]

CODE = '''import json
import os
from dataclasses import dataclass, field


@dataclass
class Config:
    name: str
    port: int = 8080
    debug: bool = False
    paths: list = field(default_factory=list)


def parse_config(path):
    """Read a JSON config file and return a Config."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"no config at {path}")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    name = data.get("name", "app")
    port = int(data.get("port", 8080))
    if port < 1 or port > 65535:
        raise ValueError(f"port out of range: {port}")
    debug = bool(data.get("debug", False))
    paths = [str(p) for p in data.get("paths", [])]
    return Config(name=name, port=port, debug=debug, paths=paths)


def save_config(config, path):
    """Write a Config back to a JSON file."""
    data = {"name": config.name, "port": config.port, "debug": config.debug, "paths": config.paths}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def main():
    config = parse_config("config.json")
    print(config.name, config.port)
    save_config(config, "config.out.json")


if __name__ == "__main__":
    main()
'''

_PEOPLE = [
    ("Maria Lopez", "harbour master"),
    ("Tom Becker", "baker"),
    ("Aiko Tanaka", "teacher"),
    ("Samuel Okafor", "doctor"),
    ("Ingrid Holm", "mayor"),
    ("Luca Romano", "fisherman"),
]
_EVENTS = [
    "the spring market",
    "the repair of the old bridge",
    "the school concert",
    "the storm in October",
    "the opening of the new library",
    "the harvest festival",
]


def document() -> str:
    """A ~1,000-token report about a small town: names, roles and events that a summary repeats."""
    paragraphs = ["Annual report of the town of Westhaven."]
    for i, event in enumerate(_EVENTS):
        a, b = _PEOPLE[i % len(_PEOPLE)], _PEOPLE[(i + 2) % len(_PEOPLE)]
        paragraphs.append(
            f"In month {i + 2} the town held {event}. {a[0]}, the {a[1]}, organised it with help from "
            f"{b[0]}, the {b[1]}. About {120 + 35 * i} people took part, and the town council spent "
            f"{1500 + 250 * i} euros on it. {a[0]} said that {event} was a success because many families "
            f"came from the villages nearby, and {b[0]} asked the council to plan {event} again next year. "
            f"The local newspaper wrote that {event} brought the town together after a difficult winter, "
            f"and that the volunteers worked for {10 + i} days to prepare everything. Some people complained "
            f"about the noise and the parking near the harbour, and the council promised to find a better "
            f"place for the cars before the next time."
        )
    paragraphs.append(
        "In total the council spent its budget as planned. "
        + " ".join(f"{name} will stay {role} next year." for name, role in _PEOPLE)
    )
    return "\n\n".join(paragraphs)


CASES = {
    "a_code": (
        [
            {
                "role": "user",
                "content": "Here is a Python module:\n\n```python\n" + CODE + "```\n\n"
                "Rename the function parse_config to load_config everywhere and write out the whole module "
                "again, with no explanation.",
            }
        ],
        256,
    ),
    "b_summary": (
        [
            {
                "role": "user",
                "content": document() + "\n\nSummarise this report: for each event, say "
                "who organised it, how many people came and what it cost.",
            }
        ],
        160,
    ),
    "c_chat": (
        [
            {
                "role": "user",
                "content": "Write a long, detailed story about a lighthouse keeper who finds an "
                "old map hidden in the wall of the lighthouse. Describe every place she visits.",
            }
        ],
        128,
    ),
}


# case -> (the case whose prompt it uses, which tiny model drafts); run on the tiny model only.
DRAFT_CASES = {"d_draft_copy": ("c_chat", "copy"), "d_draft_other": ("c_chat", "other")}


def draft_models(tiny_path) -> dict:
    import shutil
    from pathlib import Path

    from tests.tiny_model import build_tiny_model

    copy = Path(str(tiny_path) + "-copy")
    shutil.copytree(tiny_path, copy)
    other = build_tiny_model(Path(str(tiny_path) + "-other"), seed=1, context_length=32768)
    return {"copy": str(copy), "other": str(other)}


def _decode_tps(times):
    arrivals = times[1:]
    span = arrivals[-1] - arrivals[0] if len(arrivals) > 1 else 0
    return (len(arrivals) - 1) / span if span > 0 else float("nan")


async def run_chinwag(engine, messages, max_tokens, speculative, draft_model=""):
    from engine import GenerationParams, TextDelta

    conv = f"bench-spec-{uuid.uuid4().hex[:8]}"
    params = GenerationParams(
        temperature=0.0, max_tokens=max_tokens, speculative=speculative, draft_model=draft_model if speculative else ""
    )
    times, tokens, stats = [time.perf_counter()], [], None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            for t in ev.token_ids:
                times.append(time.perf_counter())
                tokens.append(t)
        else:
            stats = ev
    await engine.forget(conv)
    return {
        "decode_tps": _decode_tps(times),
        "tokens": len(tokens),
        "ids": tokens,
        "prompt_tokens": stats.prompt_tokens,
        "drafted": stats.drafted_tokens,
        "accepted": stats.accepted_tokens,
    }


def run_mlx_lm(model, tokenizer, messages, max_tokens):
    import mlx.core as mx
    from mlx_lm import stream_generate

    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    times, tokens = [time.perf_counter()], []
    for r in stream_generate(model, tokenizer, list(ids), max_tokens=max_tokens):
        if r.finish_reason is None or r.token not in tokenizer.eos_token_ids:
            times.append(time.perf_counter())
            tokens.append(r.token)
    mx.clear_cache()
    return {"decode_tps": _decode_tps(times), "tokens": len(tokens), "ids": tokens, "prompt_tokens": len(ids)}


async def measure_model(label, path, cases, reps):
    from engine import Engine
    from engine.local import loading

    engine = Engine()
    await engine.load_model(str(path))
    model, tokenizer = loading.load(path)  # what the engine does: float32 parameters on CPU
    log(f"{label}: warm-up")
    warm = [{"role": "user", "content": "Hello"}]
    await run_chinwag(engine, warm, 4, False)
    await run_chinwag(engine, warm, 4, True)
    run_mlx_lm(model, tokenizer, warm, 4)
    out = {}
    drafts = draft_models(path) if label == "tiny" and any(c in DRAFT_CASES for c in cases) else {}
    for case in cases:
        if case in DRAFT_CASES and label != "tiny":
            continue
        messages, max_tokens = CASES[DRAFT_CASES[case][0] if case in DRAFT_CASES else case]
        draft = drafts[DRAFT_CASES[case][1]] if case in DRAFT_CASES else ""
        max_tokens = 24 if common.QUICK else max_tokens
        runs = {side: [] for side in SIDES}
        for rep in range(reps):
            for side in SIDES[rep % 3 :] + SIDES[: rep % 3]:
                if side == "mlx_lm":
                    r = run_mlx_lm(model, tokenizer, messages, max_tokens)
                else:
                    r = await run_chinwag(engine, messages, max_tokens, side == "on", draft)
                r["rep"] = rep
                runs[side].append(r)
                log(
                    f"{label} {case} rep {rep} {side}: {r['decode_tps']:.1f} tok/s, {r['tokens']} tokens"
                    + (f", accepted {r['accepted']}/{r['drafted']}" if side == "on" else "")
                )
        summary, _ids = summarise_case(runs, tokenizer)
        tps = summary["decode_tps"]
        out[case] = {
            **summary,
            "on_over_mlx_lm": ratio(tps["on"], tps["mlx_lm"]),
            "off_over_mlx_lm": ratio(tps["off"], tps["mlx_lm"]),
            "per_rep_on_over_mlx_lm": [
                ratio(a["decode_tps"], b["decode_tps"]) for a, b in zip(runs["on"], runs["mlx_lm"])
            ],
        }
        log(
            f"{label} {case}: on/mlx-lm {out[case]['on_over_mlx_lm']:.2f}, on/off {out[case]['on_over_off']:.2f}, "
            f"same ids {summary['same_ids']}"
        )
    await engine.close()
    return out


def summarise_case(runs, tokenizer):
    """One case's runs per side, as both speculation figures store them: whether every side gave
    the same ids in each repetition, median tok/s, the on side's draft counts and reply start.
    The ids are dropped from the runs; returns (summary, the on side's first reply ids)."""
    same = all(len({tuple(r["ids"]) for r in reps}) == 1 for reps in zip(*runs.values()))
    ids = runs["on"][0]["ids"]
    for rs in runs.values():
        for r in rs:
            r.pop("ids")
    tps = {side: median([r["decode_tps"] for r in rs]) for side, rs in runs.items()}
    on = runs["on"]
    drafted, accepted = sum(r["drafted"] for r in on), sum(r["accepted"] for r in on)
    summary = {
        "runs": runs,
        "decode_tps": tps,
        "same_ids": same,
        "tokens": on[0]["tokens"],
        "prompt_tokens": on[0]["prompt_tokens"],
        "on_over_off": ratio(tps["on"], tps["off"]),
        "drafted": drafted,
        "accepted": accepted,
        "acceptance": ratio(accepted, drafted),
        "reply_start": tokenizer.decode(ids[:60]),
    }
    return summary, ids


async def main_async(args):
    started = time.perf_counter()
    common.temp_home()
    paths = {"starter": common.starter_path, "tiny": common.tiny_model}
    models = [m for m in args.models.split(",") if m]
    cases = [c for c in args.cases.split(",") if c]
    results = {}
    for label in models:
        results[label] = await measure_model(label, paths[label](), cases, args.reps)
    common.save(
        "speculative",
        {
            "params": {
                "reps": args.reps,
                "models": models,
                "cases": cases,
                "max_tokens": {c: CASES[c][1] for c in cases if c in CASES},
            },
            "results": results,
        },
        f"python -m bench.figures.speculative --reps {args.reps}",
        started,
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--models", default="starter,tiny")
    p.add_argument("--cases", default=",".join(list(CASES) + list(DRAFT_CASES)))
    args = p.parse_args(argv)
    asyncio.run(main_async(args))
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


SPEC_CASES = {
    "a_code": "(a) rewrite code",
    "b_summary": "(b) summarise",
    "c_chat": "(c) free chat",
    "d_draft_copy": "(d) drafts by\na copy",
    "d_draft_other": "(d) drafts by\nother weights",
}


SPEC_SIDES = [
    ("mlx_lm", "mlx-lm", COLORS["mlx_lm"]),
    ("off", "Chinwag, speculation off", "#aec7e8"),
    ("on", "Chinwag, speculation on", COLORS["chinwag"]),
]


def plot(d, res, path):
    plt = pyplot()
    models = list(d["results"])
    widths = [len(d["results"][m]) for m in models]
    fig, axes = plt.subplots(
        1, len(models), figsize=(2 + 1.9 * sum(widths), 4.2), squeeze=False, gridspec_kw={"width_ratios": widths}
    )
    width = 0.27
    for ax, model in zip(axes[0], models):
        res = d["results"][model]
        cases = list(res)
        for j, (side, label, color) in enumerate(SPEC_SIDES):
            xs = [i + (j - 1) * width for i in range(len(cases))]
            ax.bar(xs, [res[c]["decode_tps"][side] for c in cases], width, color=color, label=label)
            for x, c in zip(xs, cases):
                pts = [r["decode_tps"] for r in res[c]["runs"][side]]
                ax.scatter([x] * len(pts), pts, color="k", s=6, zorder=3)
        ax.set_xticks(
            range(len(cases)),
            [f"{SPEC_CASES.get(c, c)}\n{res[c]['on_over_mlx_lm']:.2f}x mlx-lm" for c in cases],
            fontsize=8,
        )
        ax.set_ylabel("decode tokens/s (median; dots: repetitions)")
        ax.set_title(f"{model} model")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(d, res):
    rows = []
    for model, res in d["results"].items():
        for case, r in res.items():
            t = r["decode_tps"]
            rows.append(
                [
                    model,
                    SPEC_CASES.get(case, case).replace("\n", " "),
                    r["prompt_tokens"],
                    r["tokens"],
                    f(t["mlx_lm"]),
                    f(t["off"]),
                    f(t["on"]),
                    f"**{r['on_over_mlx_lm']:.2f}x**",
                    f"{r['on_over_off']:.2f}x",
                    f"{r['accepted']}/{r['drafted']} ({f(100 * r['acceptance'], 0)}%)" if r["drafted"] else "0/0",
                    "yes" if r["same_ids"] else "**no**",
                ]
            )
    spreads = []
    for model, res in d["results"].items():
        tps = [x["decode_tps"] for r in res.values() for rs in r["runs"].values() for x in rs]
        # The same side and case from one repetition to the next: how much the machine's load moved.
        worst = max(
            max(x["decode_tps"] for x in rs) / min(x["decode_tps"] for x in rs)
            for r in res.values()
            for rs in r["runs"].values()
        )
        spreads.append(f"{model}: up to {worst:.1f}x between repetitions of one side and case" if tps else "")
    goals = []
    starter = d["results"].get("starter", {})
    for case, goal in (("a_code", 1.5), ("b_summary", 1.5), ("c_chat", 0.97)):
        if case in starter:
            r = starter[case]["on_over_mlx_lm"]
            goals.append(
                f"{SPEC_CASES[case]} goal ≥ {goal}x mlx-lm: measured **{r:.2f}x**, "
                + ("met" if r >= goal else "not met")
            )
    return [
        f"Prompt-lookup speculative decoding (`engine/local/speculative.py`): drafts copied from an earlier match of "
        f"the conversation's last tokens (a copy position kept through edits, else the longest match), verified in "
        f"one forward pass, rejected positions trimmed from the cache; how far to draft follows the match's length, "
        f"the acceptance rates learned for such matches during the turn, and what a pass is timed to cost (none "
        f"while nothing pays). Greedy, {d['params']['reps']} repetitions, the three sides rotating; decode "
        f"tok/s from the caller, (tokens − 1) / (last − first token). The tiny model has random weights and copies "
        f"nothing from its prompt: it shows what drafting costs when it never pays off. (d) drafts with a draft "
        f"model instead, on the free-chat prompt: no small/large pair of one family is available offline, so only "
        f"the tiny model runs it, for the mechanics, drafted by a copy of itself (every draft right) and by a tiny "
        f"model with the same tokenizer and other weights (drafts nearly always wrong; a failing draft model pauses "
        f"with a doubling back-off). Speculation on: the switch's value, not the backend's default.",
        "",
        table(
            [
                "model",
                "case",
                "prompt",
                "tokens",
                "mlx-lm tok/s",
                "off tok/s",
                "on tok/s",
                "on / mlx-lm",
                "on / off",
                "accepted / drafted",
                "same ids",
            ],
            rows,
        ),
        "",
        "Starter model: " + "; ".join(goals) + "." if goals else "",
        "",
        "Noise (the dots): " + "; ".join(spreads) + ", as other jobs start and stop. Starter, on / mlx-lm in "
        "each repetition: "
        + "; ".join(
            f"{SPEC_CASES.get(c, c)} " + ", ".join(f(x) for x in r["per_rep_on_over_mlx_lm"])
            for c, r in starter.items()
        )
        + ". The tiny model, at hundreds of tokens/s, "
        "is timed in milliseconds per reply on a machine shared with other test runs: its ratios are noise and "
        "only its same-ids column counts.",
    ]


FIGURE = Figure(name="speculative", title="Speculative decoding from the conversation", section=section, plot=plot)


if __name__ == "__main__":
    main()
