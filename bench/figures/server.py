"""Figure: `chinwag serve` against mlx_lm.server, 3 agent-like clients interleaved, then a restart.

Each client holds one conversation that grows by about `--grow` tokens a turn (a user message of
filler text, a short greedy reply) to about `--turns` x `--grow` tokens; the three clients take
turns one after another (the order rotates every turn), on both servers alternately. Then both
servers are stopped (Chinwag with SIGINT, which saves its caches) and started again, and every
client sends one more turn. Per turn: time to first token (first streamed content, measured by
the same httpx client for both) and the cached tokens each server reports.

Both sides serve the same float32 copy of the starter (bench/figures/remote.py) with the same BLAS.

    python -m bench.figures.server [--turns 13] [--grow 300] [--reply-tokens 16]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import ROOT, log
from bench.figures.remote import float32_copy, free_port
from bench.figures.remote import start_server as start_mlx_server
from bench.reporting import COLORS, Figure, f, pyplot, table

SIDES = ("chinwag", "mlx_lm")
CLIENTS = 3
WORDS = (
    "river stone lantern orchard violet harbour meadow copper signal window thunder ribbon "
    "compass velvet glacier saddle pepper marble falcon canyon blossom anchor ember willow"
).split()


def filler(client: int, turn: int, words: int) -> str:
    """A user message of `words` words, different for every client and turn (deterministic)."""
    picked = [WORDS[(client * 7 + turn * 13 + i * (i % 5 + 1)) % len(WORDS)] for i in range(words)]
    return f"Client {client}, note {turn}: " + " ".join(picked) + ". Summarize the note in one sentence."


def start_chinwag(folder, home, log_path):
    port = free_port()
    env = {**os.environ, "CHINWAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "app.cli.main", "serve", "--model", str(folder), "--port", str(port)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    import httpx

    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"chinwag serve exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise SystemExit("chinwag serve did not start in 300 s")


def start_both(folder, home) -> dict:
    """`chinwag serve` and mlx_lm.server on the same weights, each with its own log in `home`."""
    c_proc, c_url = start_chinwag(folder, home / "chinwag", home / "chinwag.log")
    try:
        m_proc, m_url = start_mlx_server(folder, home / f"mlx-{time.monotonic_ns()}.log")
    except BaseException:
        c_proc.terminate()  # never leave a server behind
        c_proc.wait(timeout=60)
        raise
    return {"chinwag": (c_proc, c_url), "mlx_lm": (m_proc, m_url)}


def stop(proc, sig) -> None:
    proc.send_signal(sig)
    proc.wait(timeout=120)


def turn(url: str, model: str, messages: list, reply_tokens: int) -> dict:
    """One streamed request: seconds to the first content, the reply, and the usage reported."""
    import httpx

    body = {
        "model": model,
        "messages": messages,
        "max_tokens": reply_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0, first, parts, usage = time.perf_counter(), None, [], {}
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            for choice in event.get("choices") or []:
                text = (choice.get("delta") or {}).get("content") or ""
                if text and first is None:
                    first = time.perf_counter()
                parts.append(text)
            if event.get("usage"):
                usage = event["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return {
        "ttft_s": (first or time.perf_counter()) - t0,
        "reply": "".join(parts),
        "prompt_tokens": usage.get("prompt_tokens", 0),
        "cached_tokens": details.get("cached_tokens", 0) if isinstance(details, dict) else 0,
    }


def common_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class Reuse:
    """What a server can reuse, computed on the client: the ids its cache may hold against the new prompt's.

    After a request a server's cache holds its prompt's ids and its reply's. mlx_lm.server keeps
    an LRU of such sequences and reuses the longest common prefix with any of them; Chinwag
    continues only the conversation whose messages the request begins with (a client's own), so
    its reusable prefix is that conversation's. The reply's ids are its text tokenized again: a
    reply whose text tokenizes differently from the ids generated shows here as a difference.
    """

    def __init__(self, folder):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.held: dict = {}  # (side, client) -> the ids the server's cache holds for that client

    def ids(self, messages: list) -> list:
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def expected(self, side: str, client, prompt: list) -> int:
        if side == "chinwag":
            held = [self.held.get((side, client), [])]
        else:
            held = [ids for (s, _), ids in self.held.items() if s == side]
        best = max((common_prefix(ids, prompt) for ids in held), default=0)
        return min(best, len(prompt) - 1)  # a server computes at least the prompt's last token

    def keep(self, side: str, client, prompt: list, reply: str) -> None:
        self.held[(side, client)] = prompt + list(self.tokenizer.encode(reply, add_special_tokens=False))

    def forget(self, side: str) -> None:
        """The side restarted without saving its caches."""
        self.held = {k: v for k, v in self.held.items() if k[0] != side}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--turns", type=int, default=3 if common.QUICK else 13)
    p.add_argument("--grow", type=int, default=100 if common.QUICK else 300, help="about this many tokens a turn")
    p.add_argument("--reply-tokens", type=int, default=16)
    p.add_argument("--folder", default="", help="serve this MLX folder instead (to check the script, not to quote)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    home = common.temp_home()
    folder = args.folder or float32_copy(home / "starter-float32")
    models = {"chinwag": str(folder), "mlx_lm": "default_model"}
    words = max(8, int(args.grow * 0.85))  # about 1.1 tokens a filler word, plus the reply and the template
    history = {side: [[] for _ in range(CLIENTS)] for side in SIDES}
    rows: dict = {side: [] for side in SIDES}
    reuse = Reuse(folder)

    def run_turn(servers, n: int, restart: bool) -> None:
        order = [(c, s) for c in range(CLIENTS) for s in SIDES]
        shift = n % len(order)
        for client, side in order[shift:] + order[:shift]:
            messages = history[side][client]
            messages.append({"role": "user", "content": filler(client, n, words)})
            prompt = reuse.ids(messages)
            expected = reuse.expected(side, client, prompt)
            result = turn(servers[side][1], models[side], messages, args.reply_tokens)
            reply = result.pop("reply")
            messages.append({"role": "assistant", "content": reply})
            reuse.keep(side, client, prompt, reply)
            rows[side].append(
                {
                    "turn": n + 1,
                    "client": client,
                    "after_restart": restart,
                    "client_prompt_tokens": len(prompt),
                    "reusable_tokens": expected,
                    **result,
                }
            )
            log(
                f"turn {n + 1:2d}{'R' if restart else ' '} client {client} {side:7s} ttft {result['ttft_s']:6.2f} s  "
                f"prompt {result['prompt_tokens']:5d}  cached {result['cached_tokens']:5d}  reusable {expected:5d}"
            )

    servers = start_both(folder, home)
    try:
        hi = [{"role": "user", "content": "Hi"}]
        for side in SIDES:  # warm-up; mlx_lm.server's cache keeps it too
            reuse.keep(side, "warm-up", reuse.ids(hi), turn(servers[side][1], models[side], hi, 2)["reply"])
        for n in range(args.turns):
            run_turn(servers, n, False)
        stop(servers["chinwag"][0], signal.SIGINT)  # saves the caches
        os.killpg(servers["mlx_lm"][0].pid, signal.SIGTERM)
        servers["mlx_lm"][0].wait(timeout=60)
        reuse.forget("mlx_lm")  # its prompt cache lives in memory only
        servers = start_both(folder, home)
        run_turn(servers, args.turns, True)
    finally:
        for proc, _ in servers.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)

    def medians(side: str, restart: bool) -> dict:
        by_turn: dict = {}
        for r in rows[side]:
            if r["after_restart"] == restart:
                by_turn.setdefault(r["turn"], []).append(r["ttft_s"])
        return {t: common.median(v) for t, v in sorted(by_turn.items())}

    before = {side: medians(side, False) for side in SIDES}
    after = {side: medians(side, True) for side in SIDES}
    summary = {
        "median_ttft_by_turn": before,
        "restart_median_ttft": {side: next(iter(after[side].values())) for side in SIDES},
        "worst_turn_chinwag_over_mlx_lm": max(before["chinwag"][t] / before["mlx_lm"][t] for t in before["chinwag"]),
    }
    summary["restart_mlx_lm_over_chinwag"] = (
        summary["restart_median_ttft"]["mlx_lm"] / summary["restart_median_ttft"]["chinwag"]
    )
    summary["cached_as_reusable"] = {
        side: sum(r["cached_tokens"] == r["reusable_tokens"] for r in rows[side]) for side in SIDES
    }
    summary["requests_per_side"] = len(rows["chinwag"])
    log(json.dumps(summary, indent=1))
    params = {"turns": args.turns, "grow": args.grow, "reply_tokens": args.reply_tokens, "clients": CLIENTS}
    command = (
        f"python -m bench.figures.server --turns {args.turns} --grow {args.grow} --reply-tokens {args.reply_tokens}"
    )
    common.save("server", {"params": params, "rows": rows, "summary": summary}, command, started)
    common.finish()


def _key(r) -> str:
    return f"{r['turn']}R" if r["after_restart"] else str(r["turn"])


def _verdict(met: bool) -> str:
    return "**met**" if met else "**not met**"


def section(d, res):
    s, p = d["summary"], d["params"]
    before = s["median_ttft_by_turn"]
    cached: dict = {side: {} for side in SIDES}
    exact: dict = {side: {} for side in SIDES}
    for side in SIDES:
        for r in sorted(d["rows"][side], key=lambda r: (r["turn"], r["client"])):  # cells in client order
            cached[side].setdefault(_key(r), []).append(f"{r['cached_tokens']} / {r['prompt_tokens']}")
            exact[side].setdefault(_key(r), []).append(r["cached_tokens"] == r["reusable_tokens"])

    def row(label, key, t_chinwag, t_mlx):
        return [
            label,
            f(t_chinwag),
            f(t_mlx),
            f(t_mlx / t_chinwag) + "x",
            "; ".join(cached["chinwag"][key]),
            "; ".join(cached["mlx_lm"][key]),
            " / ".join(f"{sum(exact[side][key])} of {len(exact[side][key])}" for side in SIDES),
        ]

    rows = [row(str(t), str(t), before["chinwag"][t], before["mlx_lm"][t]) for t in before["chinwag"]]
    t = next(k for k in cached["chinwag"] if k.endswith("R"))
    restart = s["restart_median_ttft"]
    rows.append(row(f"{t} (after restart)", t, restart["chinwag"], restart["mlx_lm"]))
    worst, after = s["worst_turn_chinwag_over_mlx_lm"], s["restart_mlx_lm_over_chinwag"]
    n, same = s["requests_per_side"], s["cached_as_reusable"]
    wrong = [
        f"{side} turn {_key(r)} client {r['client']}: reported {r['cached_tokens']}, reusable {r['reusable_tokens']}, "
        f"TTFT {r['ttft_s']:.2f} s"
        for side in SIDES
        for r in d["rows"][side]
        if r["cached_tokens"] != r["reusable_tokens"]
    ]
    return [
        f"{p['clients']} clients, each a conversation growing by about {p['grow']} tokens a turn for {p['turns']} "
        f"turns (greedy replies of {p['reply_tokens']} tokens), interleaved turn by turn on `chinwag serve` and "
        "`mlx_lm.server` (the same float32 copy of the starter, the same BLAS, in the same run); then both servers "
        "restarted (Chinwag with SIGINT, which saves its caches) and one more turn each. TTFT is the median over "
        "the clients, measured by the same streaming client for both. Cached is what each server reported "
        "(`usage.prompt_tokens_details.cached_tokens`) per client, against the prompt tokens it reported. "
        "Reusable is computed on the client with the model's tokenizer: the longest common prefix of the new "
        "prompt's ids with the ids the server's cache can hold (prompt and reply of every earlier request for "
        "mlx_lm.server's LRU, of the client's own conversation for Chinwag; nothing for mlx_lm.server after its "
        "restart); the last column counts the requests whose reported cached tokens equal it. Cells are in client "
        "order.",
        "",
        table(
            [
                "turn",
                "Chinwag TTFT s",
                "mlx_lm.server TTFT s",
                "mlx_lm / Chinwag",
                "Chinwag cached / prompt",
                "mlx_lm cached / prompt",
                "cached = reusable (Chinwag / mlx_lm)",
            ],
            rows,
        ),
        "",
        "Goals:",
        "",
        f"- Chinwag never slower than mlx_lm.server on any turn's median: {_verdict(worst <= 1.0)} (worst turn, "
        f"Chinwag / mlx_lm.server: {worst:.2f}x).",
        f"- At least 10x faster on the turn after the restart: {_verdict(after >= 10.0)} (mlx_lm.server took "
        f"**{after:.2f}x** Chinwag's time to first token; Chinwag restored the caches it saved on SIGINT, "
        "mlx_lm.server re-read every prompt).",
        f"- Cached tokens reported equal to the tokens the server could reuse: {_verdict(same['chinwag'] == n)} "
        f"for Chinwag ({same['chinwag']} of {n} requests); mlx_lm.server {same['mlx_lm']} of {n}."
        + (
            " Differences (a cache the server did not have, or a wrong report: the TTFT tells which): "
            + "; ".join(wrong[:8])
            + ("; ..." if len(wrong) > 8 else "")
            + "."
            if wrong
            else ""
        ),
    ]


def plot(d, res, path):
    from matplotlib.ticker import FuncFormatter

    plt = pyplot()
    s = d["summary"]
    fig, ax = plt.subplots(figsize=(8, 4))
    for side, label, style, color in (
        ("mlx_lm", "mlx_lm.server", "s--", COLORS["mlx_lm"]),
        ("chinwag", "chinwag serve", "o-", COLORS["chinwag"]),
    ):
        by_turn = s["median_ttft_by_turn"][side]
        turns = [int(t) for t in by_turn]
        ax.plot(turns, list(by_turn.values()), style, color=color, label=label)
        ax.plot([max(turns) + 1], [s["restart_median_ttft"][side]], style[0], color=color, markersize=9)
    ax.axvline(max(turns) + 0.5, color="grey", linestyle=":", linewidth=1)
    ax.set_yscale("log")  # the restart's re-read is 10x and more above the rest
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.text(
        max(turns) + 0.4, s["restart_median_ttft"]["chinwag"] * 1.6, "restart", fontsize=8, color="grey", ha="right"
    )
    ax.set_xlabel("turn (median over 3 clients)")
    ax.set_ylabel("time to first token, s (log)")
    ax.set_title("3 clients interleaved, then both servers restarted")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


FIGURE = Figure(
    name="server",
    title="Chinwag as a server: 3 clients, then a restart, against mlx_lm.server",
    section=section,
    plot=plot,
)


if __name__ == "__main__":
    main()
