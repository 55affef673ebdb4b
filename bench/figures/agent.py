"""Figure: an agent workload on `chinwag serve`: tokens computed per request.

Three sessions share a ~1.5K-token agent system prompt (rules and tool schemas); each turn adds
the model's reply and a ~300-token tool result. Turns 1 to `--turns` for every session, then the
server is stopped (SIGINT: it saves its caches) and started again, and every session sends one
more turn, and a fourth session starts. Last, a tool call sent back re-serialized (another id,
compact arguments), as agent frameworks do: no recorded conversation matches it message by
message. Per request: the prompt tokens and the cached tokens the server reports (the tokens
computed are the difference) and the time to the first token.

Chinwag alone: the side by side with a real mlx_lm.server on the same weights is not measured
here. Before shared prefixes, every new session (and the re-serialized call) computed its whole prompt.

    python -m bench.figures.agent [--turns 6] [--reply-tokens 16]
"""

import argparse
import json
import signal
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median
from bench.figures.remote import float32_copy
from bench.figures.server import start_chinwag, stop, turn
from bench.reporting import Figure, f, table

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


def main(argv=None):
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
    sessions: list[list] = []
    rows: list[dict] = []

    def ask(url: str, label: str, session: int, messages: list, phase: str) -> str:
        result = turn(url, "", messages, args.reply_tokens)
        reply = result.pop("reply")
        computed = result["prompt_tokens"] - result["cached_tokens"]
        rows.append({"label": label, "session": session, "phase": phase, "computed_tokens": computed, **result})
        log(
            f"{label:28s} prompt {result['prompt_tokens']:5d}  cached {result['cached_tokens']:5d}  ttft {result['ttft_s']:.2f} s"
        )
        return reply

    def step(url: str, s: int, n: int, phase: str) -> None:
        if s == len(sessions):  # a new session: the shared system prompt and its task
            sessions.append([{"role": "system", "content": system}, {"role": "user", "content": TASKS[s]}])
        else:
            sessions[s].append({"role": "user", "content": tool_result(s, n)})
        reply = ask(url, f"session {'ABCD'[s]} turn {n}", s, sessions[s], phase)
        sessions[s].append({"role": "assistant", "content": reply})

    proc, url = start_chinwag(folder, home / "chinwag", home / "chinwag.log")
    try:
        for n in range(1, args.turns + 1):
            for s in range(3):
                step(url, s, n, "first turn" if n == 1 else "follow-up")
    finally:
        stop(proc, signal.SIGINT)
    proc, url = start_chinwag(folder, home / "chinwag", home / "chinwag.log")
    try:
        for s in range(3):
            step(url, s, args.turns + 1, "after restart")
        step(url, 3, 1, "new session after restart")
        # Session A's agent calls a tool; the call goes back in the form the framework writes.
        call = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}}
        called = sessions[0] + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": tool_result(0, 99)},
        ]
        reply = ask(url, "session A tool call", 0, called, "tool call")
        renamed = dict(call, id="call_x7", function={"name": "read_file", "arguments": '{"path":"a.py"}'})
        again = sessions[0] + [
            {"role": "assistant", "content": None, "tool_calls": [renamed]},
            {"role": "tool", "tool_call_id": "call_x7", "content": tool_result(0, 99)},
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Now run the tests."},
        ]
        ask(url, "session A re-serialized call", 0, again, "re-serialized call")
    finally:
        stop(proc, signal.SIGINT)
    summary = summarise(rows)
    log(f"summary: {summary}")
    command = f"python -m bench.figures.agent --turns {args.turns}"
    params = {**vars(args), "system_prompt_tokens": len(tokenizer.encode(system, add_special_tokens=False))}
    common.save("agent", {"params": params, "rows": rows, "summary": summary}, command, started)
    common.finish()


def summarise(rows: list) -> dict:
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


def section(d, res):
    s, p = d["summary"], d["params"]
    rows = [
        [name, v["requests"], f(v["prompt_tokens"], 0), f(v["computed_tokens"], 0), f(v["ttft_s"] * 1e3, 0)]
        for name, v in s.items()
    ]
    new = s["new sessions"]
    return [
        f"An agent workload on `chinwag serve` with the starter (float32): 3 sessions sharing a "
        f"{p['system_prompt_tokens']:,}-token system prompt (rules and 6 tool schemas), {p['turns']} turns each adding "
        "the reply and a ~300-token tool result, a restart, one more turn each and a fourth session, then a tool "
        "call sent back with another id and compact arguments. Tokens computed = the prompt tokens less the "
        "`cached_tokens` the server reports. Medians per kind of request. Chinwag alone: a real mlx_lm.server on "
        "the same weights is not measured here. Before shared prefixes every new session and the re-serialized "
        "call computed its whole prompt.",
        "",
        f"New sessions computed **{f(new['computed_tokens'], 0)}** of {f(new['prompt_tokens'], 0)} prompt tokens; "
        f"after the restart a new session computed {f(s['new session after restart']['computed_tokens'], 0)}, "
        f"and the re-serialized call {f(s['re-serialized call']['computed_tokens'], 0)} of "
        f"{f(s['re-serialized call']['prompt_tokens'], 0)}.",
        "",
        table(["request", "requests", "prompt tokens", "tokens computed", "time to first token, ms"], rows),
    ]


def headline(d, res):
    s = d["summary"]
    new, shared = s["new sessions"], s["new session after restart"]
    return [
        [
            "agent workload: tokens computed by a new session sharing the system prompt",
            f"{f(new['computed_tokens'], 0)} of {f(new['prompt_tokens'], 0)}",
            f"{f(shared['computed_tokens'], 0)} after a restart; a re-serialized tool call "
            f"{f(s['re-serialized call']['computed_tokens'], 0)} of {f(s['re-serialized call']['prompt_tokens'], 0)}",
        ]
    ]


FIGURE = Figure(name="agent", title="Agent workload: shared prefixes on the server", section=section, headline=headline)


if __name__ == "__main__":
    main()
