"""The prefill-while-typing figure's second part: a history that changed under the chat (issue 15 §1).

Three changes, each two ways, interleaved, in fresh conversations (a system prompt, a long first
message, its reply, all cached first):

  fork           Fork from Here at the user's second message. Read ahead: `engine.fork` copies the
                 parent's cache up to the fork point; cold: the fork reads its whole chat on Enter.
  system prompt  Chat Settings › a preset › OK. Read ahead: `engine.prefill(conv, messages)` under
                 the new instructions the moment they are accepted; cold: Enter re-reads the chat.
  model switch   Another model loaded. The starter is the only model here, so the switch is the
                 starter loaded again with this chat's saved cache dropped: the new model has no
                 cache of the chat, as after a real switch. Read ahead: `engine.prefill` once loaded.

Timed from Enter (the `chat` call) to the first token; the read ahead is not timed (the user
is reading or typing), but its duration is recorded. Measured by
`python -m bench.figures.typing_prefill --changes`.
"""

import time
import uuid

from bench.common import log, median, timed_chat

KINDS = ("fork", "system prompt", "model switch")
SYSTEM = "You are a helpful assistant. Answer briefly."
NEW_SYSTEM = "You are a pirate. Answer every question as a pirate would, briefly."
SECOND = "Which of these meetings has the most people?"
QUESTION = "And which one is on Friday?"


def user(text):
    return {"role": "user", "content": text}


async def one(engine, kind: str, ahead: bool, notes: str, params) -> dict:
    from engine.models import registry

    conv = f"changes-{kind.replace(' ', '-')}-{'ahead' if ahead else 'cold'}-{uuid.uuid4().hex[:8]}"
    messages = [{"role": "system", "content": SYSTEM}, user(notes)]
    _, reply, _ = await timed_chat(engine, conv, messages, params)  # the chat so far, cached
    messages.append({"role": "assistant", "content": reply})
    target, read, read_s = conv, None, 0.0
    if kind == "fork":
        messages.append(user(SECOND))
        _, reply, _ = await timed_chat(engine, conv, messages, params)  # the parent goes on past the fork point
        await engine.wait_background()
        target, sent = f"{conv}-fork", messages  # the fork ends on the user's message: Generate Reply
        t0 = time.perf_counter()
        if ahead:
            read = await engine.fork(conv, target, messages, params)
    elif kind == "system prompt":
        await engine.wait_background()
        changed = [{"role": "system", "content": NEW_SYSTEM}] + messages[1:]
        sent = changed + [user(QUESTION)]
        t0 = time.perf_counter()
        if ahead:
            read = await engine.prefill(conv, changed, params)
    else:
        await engine.wait_background()
        await engine.load_model(registry.STARTER_ID)  # every cache saved and dropped, as on a switch
        await engine.forget(conv)  # ...and this chat has none on the new model
        sent = messages + [user(QUESTION)]
        t0 = time.perf_counter()
        if ahead:
            read = await engine.prefill(conv, messages, params)
    read_s = time.perf_counter() - t0
    ttft, _text, stats = await timed_chat(engine, target, sent, params)
    for c in {conv, target}:
        await engine.forget(c)
    return {
        "ttft_s": ttft,
        "prompt_tokens": stats.prompt_tokens,
        "reused_tokens": stats.reused_tokens,
        "prefilled_tokens": stats.prefilled_tokens,
        "read_ahead_s": read_s if ahead else None,
        "read_ahead_tokens": getattr(read, "computed_tokens", getattr(read, "copied_tokens", 0)) if read else 0,
        "prompt_ids": list(stats.prompt_ids),
        "reply_ids": list(stats.reply_ids),
    }


async def measure(engine, notes: str, reps: int, params) -> tuple[list, dict]:
    """(rows, raw): each change's medians both ways, and every run."""
    raw = {kind: {"ahead": [], "cold": []} for kind in KINDS}
    await one(engine, "fork", True, notes, params)  # warm-up, not counted: the first turns of a run are slower
    for rep in range(reps):
        for i, kind in enumerate(KINDS):
            order = (True, False) if (rep + i) % 2 == 0 else (False, True)
            for ahead in order:
                row = await one(engine, kind, ahead, notes, params)
                raw[kind]["ahead" if ahead else "cold"].append(row)
                log(
                    f"{kind}, {'ahead' if ahead else 'cold'}: TTFT {row['ttft_s']:.3f} s, "
                    f"prefilled {row['prefilled_tokens']} of {row['prompt_tokens']}"
                )
    rows = []
    for kind in KINDS:
        a, c = raw[kind]["ahead"], raw[kind]["cold"]
        rows.append(
            {
                "kind": kind,
                "prompt_tokens": c[0]["prompt_tokens"],
                "cold_ttft_s": median([x["ttft_s"] for x in c]),
                "ahead_ttft_s": median([x["ttft_s"] for x in a]),
                "cold_prefilled_tokens": median([x["prefilled_tokens"] for x in c]),
                "ahead_prefilled_tokens": median([x["prefilled_tokens"] for x in a]),
                "read_ahead_s": median([x["read_ahead_s"] for x in a]),
                # The same prompt ids both ways (a fork read cold re-tokenizes its replies' text).
                "same_prompt": all(x["prompt_ids"] == a[0]["prompt_ids"] for x in a + c),
                "identical_replies": all(x["reply_ids"] == a[0]["reply_ids"] for x in a + c),
            }
        )
        rows[-1]["speedup"] = rows[-1]["cold_ttft_s"] / rows[-1]["ahead_ttft_s"]
    for side in raw.values():
        for runs in side.values():
            for x in runs:
                del x["prompt_ids"], x["reply_ids"]
    return rows, raw
