"""Time from a tool result to the model's next first token, at about 4,000 tokens of history:
the conversation's cache (only the result's tokens are computed) against a re-prefill of the chat.

The tests' tiny model with a Hermes-style tool template (tests/tiny_model.py; the starter has no
tool support), so the figure measures Chinwag's work, not a model's speed: a chat of about
`--history` tokens, a scripted tool call (forced tokens), then the result. Cached: the same
conversation continues. Re-prefill: a fresh conversation gets the same messages. The two
alternate, A B B A.

    python -m bench.figures.tools [--history 4000] [--reps 6]
"""

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median
from bench.reporting import Figure, f, table

FILLER = "The quick brown fox jumps over the lazy dog. A chat app keeps every conversation. "


def history(tokenizer, target: int) -> list:
    """User and assistant turns until the chat holds about `target` tokens."""
    messages: list = []
    while sum(len(tokenizer.encode(m["content"])) for m in messages) < target:
        i = len(messages) // 2
        messages += [
            {"role": "user", "content": f"Turn {i}: " + FILLER * 3},
            {"role": "assistant", "content": f"Noted {i}. " + FILLER * 3},
        ]
    return messages


async def measure(model_path, target: int, reps: int) -> list:
    from engine import Engine, GenerationParams, TextDelta, TurnStats
    from engine.local import loading
    from tests.app.tools.scripted import ADD, Script, tool_call_ids

    _, tokenizer = loading.load(model_path)
    forced = tool_call_ids(tokenizer, "add", '{"a": 2, "b": 3}')
    base = GenerationParams(temperature=0.0, max_tokens=8, speculative=False, tools=(ADD,))
    engine = Engine()
    await engine.load_model(str(model_path))

    async def turn(conv, messages, params):
        text, stats = "", None
        async for ev in engine.chat(conv, messages, params):
            if isinstance(ev, TextDelta):
                text += ev.text
            elif isinstance(ev, TurnStats):
                stats = ev
        return text, stats

    chat = history(tokenizer, target) + [{"role": "user", "content": "What is 2 plus 3?"}]
    rows = []
    try:

        def scripted():
            return dataclasses.replace(base, max_tokens=len(forced) + 4, logits_processors=(Script(forced),))

        text, first = await turn("cached", chat, scripted())
        assert first.tool_calls, "the scripted call was not parsed"
        after = chat + [
            {"role": "assistant", "content": text},
            {"role": "tool", "content": "5.0", "tool_call_id": first.tool_calls[0].id},
        ]
        for rep in range(reps + 1):  # the first round warms up
            for kind in ("cached", "reprefill") if rep % 2 == 0 else ("reprefill", "cached"):
                if kind == "cached":
                    # The call again (its history reused), then the result: only the result's tokens are new.
                    await turn("cached", chat, scripted())
                    _, stats = await turn("cached", after, base)
                else:
                    await engine.forget("fresh")
                    _, stats = await turn("fresh", after, base)
                if rep:
                    rows.append(
                        {
                            "kind": kind,
                            "rep": rep,
                            "ttft_s": stats.ttft_s,
                            "prompt_tokens": stats.prompt_tokens,
                            "prefilled_tokens": stats.prefilled_tokens,
                        }
                    )
            log(f"rep {rep}: {rows[-2:] if rep else 'warm-up'}")
    finally:
        await engine.close()
    return rows


def summarise(rows) -> dict:
    out = {}
    for kind in ("cached", "reprefill"):
        mine = [r for r in rows if r["kind"] == kind]
        out[kind] = {
            "ttft_s": median([r["ttft_s"] for r in mine]),
            "prefilled_tokens": median([r["prefilled_tokens"] for r in mine]),
            "prompt_tokens": median([r["prompt_tokens"] for r in mine]),
        }
    out["speedup"] = out["reprefill"]["ttft_s"] / out["cached"]["ttft_s"]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--history", type=int, default=1000 if common.QUICK else 4000)
    p.add_argument("--reps", type=int, default=common.reps(6, 2))
    args = p.parse_args(argv)
    started = time.perf_counter()
    common.temp_home()
    from tests.tiny_model import TOOLS_TEMPLATE, build_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="chinwag-bench-tools-")) / "tiny-tools"
    model = build_tiny_model(folder, context_length=args.history * 2 + 1024, chat_template=TOOLS_TEMPLATE)
    rows = asyncio.run(measure(model, args.history, args.reps))
    result = {"params": vars(args), "rows": rows, "summary": summarise(rows)}
    log(f"summary: {result['summary']}")
    common.save("tools", result, f"python -m bench.figures.tools --history {args.history} --reps {args.reps}", started)
    common.finish()


# --- the report ------------------------------------------------------------------------------


def section(d, res):
    s, p = d["summary"], d["params"]  # the prompt grows past --history by whole turns
    rows = [
        [
            "cached (the conversation continues)",
            f(s["cached"]["ttft_s"] * 1e3, 1),
            int(s["cached"]["prefilled_tokens"]),
        ],
        [
            "re-prefill (a fresh conversation)",
            f(s["reprefill"]["ttft_s"] * 1e3, 1),
            int(s["reprefill"]["prefilled_tokens"]),
        ],
    ]
    return [
        f"A chat of {int(s['cached']['prompt_tokens']):,} tokens on the tests' tiny model with a Hermes-style tool template, a "
        "scripted tool call, then its result: the time to the next reply's first token when the conversation's "
        "cache continues (only the result's tokens are computed) and when the same messages are read afresh. "
        f"Medians of {p['reps']} interleaved runs each. Goal: at least 10x. Measured: **{f(s['speedup'], 1)}x**.",
        "",
        table(["after the tool result", "time to first token, ms", "tokens computed"], rows),
    ]


def headline(d, res):
    s = d["summary"]
    return [
        [
            "time from a tool result to the next first token, re-prefill / cached",
            f"{f(s['speedup'], 1)}x",
            f"at {int(s['cached']['prompt_tokens']):,} tokens of history; goal ≥ 10x",
        ]
    ]


FIGURE = Figure(name="tools", title="Tool results: the next first token", section=section, headline=headline)


if __name__ == "__main__":
    main()
