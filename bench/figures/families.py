"""Every model family: tokens reused out of the prompt on each kind of turn, and what a window costs.

Part 1 runs tests/family_chat.py's scripted chat (7 turns past a 32-token window, regenerate,
an edit of the last message and of a middle one, a version switch, a read-ahead draft then a
longer message, a restart, an eviction) on each family's tiny random-weight fixture
(tests/tiny_families.py: the real mlx-lm classes) and reports, per step, the tokens reused out
of the prompt. Part 2, when Gemma 3 270M is installed (its PyPI package, as the README's set-up
does), times a follow-up at about 2K tokens of history: from the cache, read again from nothing
(a new conversation with the same messages), and after a restart; interleaved, median of reps.

    python -m bench.figures.families [--reps 3] [--history 2000]
"""

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, timed_chat
from bench.reporting import Figure, table

STEPS = ["follow-up", "regenerate", "edit last", "edit middle", "switch back", "after draft", "after restart",
         "after eviction"]  # fmt: skip


def _kind(name: str) -> str:
    from tests.tiny_families import LATENT, RECURRENT, WINDOWED

    return "recurrent" if name in RECURRENT else "sliding window" if name in WINDOWED else (
        "latent (MLA)" if name in LATENT else "attention")  # fmt: skip


def reuse_part(root: Path) -> list:
    """One row per family: (reused, prompt) tokens of each step of the scripted chat."""
    import os

    from tests.family_chat import run_chat
    from tests.tiny_families import FAMILIES, build_family_model

    rows = []
    for name in sorted(FAMILIES):
        path = build_family_model(root / name, name)
        os.environ["CHINWAG_HOME"] = str(root / f"home-{name}")
        script = asyncio.run(run_chat(path))
        follow = script.turns[1:]
        steps = {"follow-up": (sum(s.reused_tokens for s in follow), sum(s.prompt_tokens for s in follow))}
        for step in STEPS[1:]:
            s = script.steps[step]
            steps[step] = (s.reused_tokens, s.prompt_tokens)
        rows.append({"family": name, "kind": _kind(name), "steps": steps})
        log(name, steps)
    return rows


def history_messages(tokens: int) -> list:
    """A chat of about `tokens` tokens: English turns, each followed by a short reply."""
    text = (
        "The quick brown fox jumps over the lazy dog while the farmer watches from the porch, "
        "thinking about the harvest, the weather and the long road to the market in town. "
    )
    messages, n = [{"role": "system", "content": "You are a helpful assistant."}], 0
    while n < tokens:
        messages += [{"role": "user", "content": text * 3}, {"role": "assistant", "content": "I see."}]
        n += 120
    return messages + [{"role": "user", "content": "Summarise the story in one line."}]


async def gemma_part(reps: int, history: int) -> dict | None:
    from engine import Engine, GenerationParams
    from engine.models.folders import GEMMA_ID

    spec = GEMMA_ID
    params = GenerationParams(temperature=0.0, max_tokens=8)
    messages = history_messages(history)
    sides: dict = {"cached": [], "re-read": [], "restart": []}
    prompt = 0
    for rep in range(reps):
        engine = Engine()
        try:
            await engine.load_model(spec)
        except Exception as e:  # noqa: BLE001 - not installed: the part is skipped and says so
            log("Gemma 3 270M not available:", e)
            return None
        try:
            await timed_chat(engine, "g", messages[:-1] + [{"role": "user", "content": "Hello."}], params)
            for side in ("cached", "re-read") if rep % 2 == 0 else ("re-read", "cached"):
                conv = "g" if side == "cached" else f"fresh-{rep}"
                ttft, _, stats = await timed_chat(engine, conv, messages, params)
                sides[side].append(ttft)
                prompt = stats.prompt_tokens
                if side == "cached":  # back to the history without the question, for the next rep's turn
                    await engine.forget("g")
                    await timed_chat(engine, "g", messages[:-1] + [{"role": "user", "content": "Hello."}], params)
        finally:
            await engine.close()
        engine = Engine()
        try:
            await engine.load_model(spec)
            ttft, _, stats = await timed_chat(engine, "g", messages, params)
            sides["restart"].append(ttft)
        finally:
            await engine.close()
    return {"prompt_tokens": prompt, **{k: statistics.median(v) for k, v in sides.items()}}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--history", type=int, default=2000)
    args = p.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="chinwag-bench-families-") as tmp:
        rows = reuse_part(Path(tmp))
        gemma = asyncio.run(gemma_part(args.reps, args.history))
    common.save(
        "families",
        {"params": vars(args), "families": rows, "gemma": gemma},
        f"python -m bench.figures.families --reps {args.reps} --history {args.history}",
        started,
    )
    common.finish()


def _cell(pair) -> str:
    reused, prompt = pair
    return f"{reused:,} / {prompt:,}"


def section(d, res):
    rows = [[r["family"], r["kind"], *(_cell(r["steps"][s]) for s in STEPS)] for r in d["families"]]
    lines = [
        "Tokens reused out of the prompt (reused / prompt), one scripted chat per family on its tiny "
        "random-weight fixture (windows of 32 tokens, replies of 12): follow-up sums turns 2–7; "
        "regenerate re-sends the last turn; edit last changes its message; edit middle changes the "
        "third message; switch back returns to the original; after draft is the message sent after a "
        "read-ahead of its first word; after restart and after eviction continue the chat from its "
        "saved cache. Every reply equals a fresh mlx-lm computation (tests/engine/test_families.py).",
        "",
        table(["family", "cache", *STEPS], rows),
        "",
    ]
    g = d.get("gemma")
    if g:
        lines += [
            f"Gemma 3 270M, a follow-up at {g['prompt_tokens']:,} tokens of history, median time to first token: "
            f"{g['cached']:.2f} s from the cache, {g['re-read']:.2f} s read again from nothing "
            f"({g['re-read'] / g['cached']:.1f}x), {g['restart']:.2f} s after a restart (from the saved cache).",
        ]
    else:
        lines += ["Gemma 3 270M was not installed for this run: its part was skipped."]
    return lines


def headline(d, res):
    rows = [["every family: regenerate reuses", f"**{sum(1 for r in d['families'] if r['steps']['regenerate'][0])}"
             f" of {len(d['families'])}**", "families with reuse on regenerate"]]  # fmt: skip
    g = d.get("gemma")
    if g:
        rows.append(["Gemma 3 270M follow-up: re-read / cache", f"**{g['re-read'] / g['cached']:.1f}x**",
                     f"{g['prompt_tokens']:,} tokens"])  # fmt: skip
    return rows


FIGURE = Figure(name="families", title="Every model family: reuse, and Gemma 3 270M", section=section,
                headline=headline)  # fmt: skip


if __name__ == "__main__":
    main()
