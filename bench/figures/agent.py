"""Figure: an agent workload on `chinwag serve` and mlx_lm.server: tokens computed per request.

Three sessions share a ~1.5K-token agent system prompt (rules and tool schemas); each turn adds
the model's reply and a ~300-token tool result. Turns 1 to `--turns` for every session, then the
servers are stopped (Chinwag with SIGINT: it saves its caches) and started again, and every session sends one
more turn, and a fourth session starts. Last, a tool call sent back re-serialized (another id,
compact arguments), as agent frameworks do: no recorded conversation matches it message by
message. Per request: the prompt tokens and the cached tokens the server reports (the tokens
computed are the difference) and the time to the first token.

Side by side with a real mlx_lm.server on the same float32 weights (bench/figures/remote.py), one
request each in turn; the replies are compared.

    python -m bench.figures.agent [--turns 6] [--reply-tokens 16]
"""

import argparse
import json
import os
import signal
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median
from bench.figures.remote import float32_copy
from bench.figures.server import start_both, stop, turn
from bench.reporting import Figure, f, table

SIDES = ("chinwag", "mlx_lm")

TOOLS = [
    ("read_file", "Read a file of the repository.", {"path": "string", "start_line": "integer", "end_line": "integer"}),
    ("write_file", "Write a whole file.", {"path": "string", "content": "string"}),
    ("run_tests", "Run the test suite or one test file.", {"target": "string", "timeout_seconds": "integer"}),
    ("search_code", "Search the repository for a regular expression.", {"pattern": "string", "glob": "string"}),
    ("list_directory", "List a folder's entries.", {"path": "string", "depth": "integer"}),
    ("git_diff", "Show the working tree's changes.", {"path": "string", "staged": "boolean"}),
]
RULES = (
    "Read the relevant files before you change them. Keep every change small and explain why it is needed. "
    "Run the tests after each change and report failures with the exact error. Never invent file contents. "
    "Prefer the standard library. Ask before deleting anything. Answer in short paragraphs. "
)
TASKS = [
    "Fix the failing test in tests/test_parser.py: the date parser rejects ISO weeks.",
    "Add a --verbose flag to the command line tool and document it in the README.",
    "Find out why the cache grows without bound when the server runs for a day.",
    "Rename the Config class to Settings everywhere and keep the old name as an alias.",
]


def system_prompt(tokens_wanted: int, count) -> str:
    """Rules and tool schemas, the rules repeated until the prompt holds about `tokens_wanted` tokens."""
    schemas = [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": doc,
                "parameters": {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}},
            },
        }
        for name, doc, props in TOOLS
    ]
    head = "You are a coding agent working in a Python repository. Tools:\n" + json.dumps(schemas, indent=1) + "\n"
    text, i = head, 0
    while count(text) < tokens_wanted:
        i += 1
        text += f"Rule set {i}: " + RULES
    return text


def tool_result(session: int, n: int) -> str:
    """About 300 tokens of a file read: different for every session and turn."""
    lines = [f"{k + 1:4d}  def step_{session}_{n}_{k}(value):  return value * {k + n} + {session}" for k in range(12)]
    return f"read_file src/module_{session}_{n}.py (lines 1-12):\n" + "\n".join(lines)


def hermes(message: dict) -> dict:
    """An assistant message's tool calls as the text Chinwag writes them in (service.written_back), for
    mlx_lm.server, whose use of this template would drop them: both servers see the same prompt."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    blocks = [
        f'<tool_call>\n{{"name": {json.dumps(c["function"]["name"])}, "arguments": {c["function"]["arguments"]}}}\n</tool_call>'
        for c in calls
    ]
    return {"role": "assistant", "content": "\n".join(blocks)}


def main(argv=None):  # noqa: C901 - the workload in order: turns, a restart, a new session, the tool calls
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=2 if common.QUICK else 6)
    p.add_argument("--system-tokens", type=int, default=1530)
    p.add_argument("--reply-tokens", type=int, default=16)
    p.add_argument("--folder", default="", help="serve this MLX folder instead (to check the script, not to quote)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    home = common.temp_home()
    folder = args.folder or float32_copy(home / "starter-float32")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    system = system_prompt(args.system_tokens, lambda t: len(tokenizer.encode(t, add_special_tokens=False)))
    models = {"chinwag": "", "mlx_lm": "default_model"}
    sessions: dict = {side: [] for side in SIDES}
    rows: dict = {side: [] for side in SIDES}
    order = [0]  # which side goes first: alternates every request

    def ask(servers: dict, label: str, session: int, messages: dict, phase: str) -> dict:
        replies = {}
        sides = SIDES if order[0] % 2 == 0 else SIDES[::-1]
        order[0] += 1
        for side in sides:
            sent = messages[side] if side == "chinwag" else [hermes(m) for m in messages[side]]
            result = turn(servers[side][1], models[side], sent, args.reply_tokens)
            replies[side] = result.pop("reply")
            computed = result["prompt_tokens"] - result["cached_tokens"]
            rows[side].append(
                {"label": label, "session": session, "phase": phase, "computed_tokens": computed, **result}
            )
            log(
                f"{label:28s} {side:7s} prompt {result['prompt_tokens']:5d}  cached {result['cached_tokens']:5d}  "
                f"ttft {result['ttft_s']:.2f} s"
            )
        rows["chinwag"][-1]["same_reply"] = replies["chinwag"] == replies["mlx_lm"]
        return replies

    def step(servers: dict, s: int, n: int, phase: str) -> None:
        for side in SIDES:
            if s == len(sessions[side]):  # a new session: the shared system prompt and its task
                sessions[side].append([{"role": "system", "content": system}, {"role": "user", "content": TASKS[s]}])
            else:
                sessions[side][s].append({"role": "user", "content": tool_result(s, n)})
        replies = ask(servers, f"session {'ABCD'[s]} turn {n}", s, {k: v[s] for k, v in sessions.items()}, phase)
        for side in SIDES:
            sessions[side][s].append({"role": "assistant", "content": replies[side]})

    def stop_both(servers: dict) -> None:
        for side, (proc, _) in servers.items():
            if proc.poll() is None:
                if side == "chinwag":
                    stop(proc, signal.SIGINT)  # saves the caches
                else:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=60)

    servers = start_both(folder, home)
    try:
        for n in range(1, args.turns + 1):
            for s in range(3):
                step(servers, s, n, "first turn" if n == 1 else "follow-up")
    finally:
        stop_both(servers)
    servers = start_both(folder, home)
    try:
        for s in range(3):
            step(servers, s, args.turns + 1, "after restart")
        step(servers, 3, 1, "new session after restart")
        # Session A's agent calls a tool; the call goes back in the form the framework writes.
        call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        result = {"role": "tool", "tool_call_id": "call_1", "content": tool_result(0, 99)}
        called = {
            side: sessions[side][0] + [{"role": "assistant", "content": "", "tool_calls": [call]}, result]
            for side in SIDES
        }
        replies = ask(servers, "session A tool call", 0, called, "tool call")
        renamed = dict(call, id="call_x7", function={"name": "read_file", "arguments": '{"path":"a.py"}'})
        again = {
            side: sessions[side][0]
            + [
                {"role": "assistant", "content": "", "tool_calls": [renamed]},
                dict(result, tool_call_id="call_x7"),
                {"role": "assistant", "content": replies[side]},
                {"role": "user", "content": "Now run the tests."},
            ]
            for side in SIDES
        }
        ask(servers, "session A re-serialized call", 0, again, "re-serialized call")
    finally:
        stop_both(servers)
    summary = {side: summarise(rows[side]) for side in SIDES}
    summary["same_replies"] = sum(r.get("same_reply", False) for r in rows["chinwag"])
    summary["requests"] = len(rows["chinwag"])
    log(f"summary: {json.dumps(summary, indent=1)}")
    command = f"python -m bench.figures.agent --turns {args.turns}"
    params = {**vars(args), "system_prompt_tokens": len(tokenizer.encode(system, add_special_tokens=False))}
    common.save("agent", {"params": params, "rows": rows, "summary": summary}, command, started)
    common.finish()


def summarise(rows: list) -> dict:
    """One side's requests by kind: how many, and the medians of their prompt, tokens computed and time."""

    def of(phase: str, sessions=None) -> dict:
        mine = [r for r in rows if r["phase"] == phase and (sessions is None or r["session"] in sessions)]
        return {
            "requests": len(mine),
            "prompt_tokens": median([r["prompt_tokens"] for r in mine]),
            "computed_tokens": median([r["computed_tokens"] for r in mine]),
            "ttft_s": median([r["ttft_s"] for r in mine]),
        }

    return {
        "first session": of("first turn", {0}),
        "new sessions": of("first turn", {1, 2}),
        "follow-ups": of("follow-up"),
        "after restart": of("after restart"),
        "new session after restart": of("new session after restart"),
        "tool call": of("tool call"),
        "re-serialized call": of("re-serialized call"),
    }


# --- the report ------------------------------------------------------------------------------

KINDS = (
    "first session",
    "new sessions",
    "follow-ups",
    "after restart",
    "new session after restart",
    "tool call",
    "re-serialized call",
)


def section(d, res):
    s, p = d["summary"], d["params"]
    c, m = s["chinwag"], s["mlx_lm"]
    rows = [
        [
            kind,
            c[kind]["requests"],
            f(c[kind]["prompt_tokens"], 0),
            f(c[kind]["computed_tokens"], 0),
            f(m[kind]["computed_tokens"], 0),
            f(c[kind]["ttft_s"] * 1e3, 0),
            f(m[kind]["ttft_s"] * 1e3, 0),
        ]
        for kind in KINDS
    ]
    return [
        f"An agent workload on `chinwag serve` and a real mlx_lm.server, one request each in turn (the first side "
        f"alternates), on the same float32 copy of the starter: 3 sessions sharing a {p['system_prompt_tokens']:,}-token "
        f"system prompt (rules and 6 tool schemas), {p['turns']} turns each adding the reply and a ~300-token tool "
        "result, both servers stopped and started again, one more turn each and a fourth session, then a tool call and "
        "the same call sent back with another id and compact arguments (to mlx_lm.server, whose use of this template "
        "drops `tool_calls`, as the text Chinwag writes them in). Tokens computed = prompt tokens less the "
        "`cached_tokens` each server reports. Medians per kind of request. Replies identical on "
        f"{s['same_replies']} of {s['requests']} requests.",
        "",
        f"New sessions: Chinwag computed **{f(c['new sessions']['computed_tokens'], 0)}** of "
        f"{f(c['new sessions']['prompt_tokens'], 0)} prompt tokens, mlx_lm.server "
        f"{f(m['new sessions']['computed_tokens'], 0)}; a new session after the restart "
        f"{f(c['new session after restart']['computed_tokens'], 0)} against "
        f"{f(m['new session after restart']['computed_tokens'], 0)}; the re-serialized call "
        f"{f(c['re-serialized call']['computed_tokens'], 0)} against {f(m['re-serialized call']['computed_tokens'], 0)}.",
        "",
        table(
            [
                "request",
                "requests",
                "prompt tokens",
                "computed: Chinwag",
                "computed: mlx_lm.server",
                "first token, ms: Chinwag",
                "first token, ms: mlx_lm.server",
            ],
            rows,
        ),
    ]


def headline(d, res):
    c, m = d["summary"]["chinwag"], d["summary"]["mlx_lm"]
    return [
        [
            "agent workload: tokens a new session sharing the system prompt computes, Chinwag / mlx_lm.server",
            f"{f(c['new sessions']['computed_tokens'], 0)} / {f(m['new sessions']['computed_tokens'], 0)}",
            f"after a restart {f(c['new session after restart']['computed_tokens'], 0)} / "
            f"{f(m['new session after restart']['computed_tokens'], 0)}; a re-serialized tool call "
            f"{f(c['re-serialized call']['computed_tokens'], 0)} / {f(m['re-serialized call']['computed_tokens'], 0)}",
        ]
    ]


FIGURE = Figure(name="agent", title="Agent workload: shared prefixes on the server", section=section, headline=headline)


if __name__ == "__main__":
    main()
