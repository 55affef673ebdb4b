"""The window. Cold start to the first paint of the main window (empty, and with a
50-message conversation open), and the Qt event loop's longest stall while a reply streams
at full speed.

Every measurement runs in a fresh subprocess with QT_QPA_PLATFORM=offscreen (no display
here) and a throwaway CHINWAG_HOME:

  cold start   the parent notes the time, starts `python -m bench.ui_start`, which
               calls app.gui.main.run_app() exactly as `chinwag` does; an event filter notes
               the first Paint event of the main window and the child exits there. The two
               cases (empty / 50 messages) alternate.
  streaming    MainWindow(store, Engine()) on the tiny model (decodes far faster than any
               real model here: the hardest case for the GUI thread), one reply of N tokens
               sent through the composer. A 5 ms QTimer probe on the GUI thread records
               every gap between its ticks; a gap longer than the interval is a stall. The
               same probe runs for as long with the window idle, for comparison. Update
               rate: tokens reaching the GUI thread (EngineBridge.delta) and re-renders of
               the streaming message (ChatView.render_count) per second. Two replies per window,
               each in a new conversation: the first after start, then a second one.

    python -m bench.figures.ui [--reps 3] [--tokens 1500]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, percentile
from bench.reporting import COLORS, Figure, f, pyplot, table
from engine.models.folders import STARTER_ID

PROBE_MS = 5
MESSAGES = 50


def _env(home):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", CHINWAG_HOME=str(home))
    env.pop("CHINWAG_BENCH_NO_REPORT", None)
    return env


def _fill_store(home, n_messages: int):
    """A conversation of n messages (markdown, code, lists) that the window reopens at start."""
    os.environ["CHINWAG_HOME"] = str(home)
    from app.core.store import Store

    store = Store()
    conv = store.create_conversation(title="A long chat", model_id=STARTER_ID)
    for i in range(n_messages):
        if i % 2 == 0:
            store.add_message(
                conv.id,
                "user",
                f"Question {i // 2}: how do I sort a list of records by two keys in Python, and keep it stable?",
            )
        else:
            body = (
                f"## Answer {i // 2}\n\nUse `sorted` with a **tuple key**; Python's sort is stable:\n\n"
                "```python\nrows = sorted(rows, key=lambda r: (r.last, r.first))\n"
                "for r in rows:\n    print(r)\n```\n\n"
                "- sort by the secondary key first\n- then by the primary key\n- both passes are stable\n\n"
                + "The same idea works for any number of keys. "
                * 6
            )
            store.add_message(
                conv.id,
                "assistant",
                body,
                model_id=STARTER_ID,
                stats={"generated_tokens": 120, "decode_tps": 8.0, "ttft_s": 0.5, "finish_reason": "stop"},
            )
    store.set_state("last_conversation", conv.id)
    store.close()


# --- children ---------------------------------------------------------------------------


def child_stream(model_path: str, tokens: int):
    import asyncio

    from PySide6.QtCore import Qt, QTimer
    from PySide6.QtWidgets import QApplication

    import qasync

    from app.core.settings import DEFAULTS_KEY
    from app.core.store import Store
    from app.gui.window import MainWindow
    from engine.api import Engine

    app = QApplication([sys.argv[0]])
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    store = Store()
    store.set_state(DEFAULTS_KEY, {"max_tokens": tokens, "temperature": 0.0})
    window = MainWindow(store, Engine())
    window.show()
    out = {}
    gaps, ticks = [], []
    deltas = []

    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.setInterval(PROBE_MS)

    def tick():
        now = time.perf_counter()
        if ticks:
            gaps.append(now - ticks[-1])
        ticks.append(now)

    timer.timeout.connect(tick)
    window.bridge.delta.connect(lambda _c, _t: deltas.append(time.perf_counter()))

    def probe_stats(gs):
        return {
            "ticks": len(gs),
            "p50_gap_ms": percentile(gs, 50) * 1e3,
            "p99_gap_ms": percentile(gs, 99) * 1e3,
            "max_gap_ms": max(gs) * 1e3 if gs else 0.0,
            "stalls_over_50ms": sum(1 for g in gs if g > 0.050),
        }

    async def stream_once():
        gaps.clear(), ticks.clear(), deltas.clear()
        renders0 = window.chat_view.render_count
        window.composer.set_text("Tell me a story about a cat and a long journey.")
        timer.start()
        t0 = time.perf_counter()
        window.composer.submit()  # synchronous on the GUI thread: store writes, widgets, the engine call
        submit_s = time.perf_counter() - t0
        while window.chat.gen is None:
            await asyncio.sleep(0.001)
        while window.chat.gen is not None or window.bridge.is_generating():
            await asyncio.sleep(0.01)
        t1 = time.perf_counter()
        timer.stop()
        first = deltas[0] if deltas else t1
        span = t1 - first
        stream = probe_stats(list(gaps))
        # Where the longest gap fell: before the first token, while tokens arrived, or after the last
        if gaps:
            i = max(range(len(gaps)), key=gaps.__getitem__)
            end_of_gap = ticks[i + 1]
            last = deltas[-1] if deltas else t1
            stream["max_gap_at"] = (
                "before the first token"
                if end_of_gap <= first
                else "after the last token (finishing the reply)"
                if end_of_gap - gaps[i] >= last
                else "while tokens arrived"
            )
            stream["max_gap_after_last_token_ms"] = (end_of_gap - gaps[i] - last) * 1e3
            during = [g for g, t in zip(gaps, ticks[1:]) if first < t - g and t <= last]
            stream["max_gap_while_tokens_ms"] = max(during) * 1e3 if during else 0.0
        msgs = store.get_conversation(window.chat.conv_id).messages
        stats = msgs[-1].stats or {}
        stream.update(
            {
                "seconds": t1 - t0,
                "tokens": stats.get("generated_tokens", 0),
                "engine_decode_tps": stats.get("decode_tps", 0.0),
                "deltas": len(deltas),
                "deltas_per_s": len(deltas) / span if span > 0 else 0.0,
                "renders": window.chat_view.render_count - renders0,
                "renders_per_s": (window.chat_view.render_count - renders0) / span if span > 0 else 0.0,
                "reply_chars": len(msgs[-1].content),
                "ttft_in_window_s": first - t0,
                "submit_call_ms": submit_s * 1e3,
            }
        )
        return stream

    async def scenario():
        await window.start_engine(model_path)
        if window.bridge.current_model is None:
            raise SystemExit(f"the model did not load: {window.bridge.last_error}")
        await asyncio.sleep(0.5)
        # idle: the same probe, nothing streaming
        gaps.clear(), ticks.clear()
        timer.start()
        await asyncio.sleep(3.0)
        timer.stop()
        out["idle"] = probe_stats(list(gaps))
        # streaming: twice, each in a new conversation; the first reply after start pays one-time costs
        out["streaming_first"] = await stream_once()
        window.chat.new_conversation()
        await asyncio.sleep(0.5)
        out["streaming"] = await stream_once()
        await window.shutdown()

    with loop:
        loop.run_until_complete(scenario())
    print(json.dumps(out), flush=True)
    os._exit(0)  # skip Qt teardown: the numbers are out


# --- the parent -------------------------------------------------------------------------


def _child(args, env, timeout=300):
    if args[0] == "child-start":
        cmd = [sys.executable, "-m", "bench.ui_start"]
    else:
        cmd = [sys.executable, "-m", "bench.figures.ui", *args]
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=common.ROOT)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(args)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return t0, json.loads(lines[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--tokens", type=int, default=300 if common.QUICK else 1500)
    args = p.parse_args(argv)
    started = time.perf_counter()
    import tempfile
    from pathlib import Path

    homes = {
        "empty": Path(tempfile.mkdtemp(prefix="chinwag-bench-ui-empty-")),
        "50 messages": Path(tempfile.mkdtemp(prefix="chinwag-bench-ui-50-")),
    }
    saved_home = os.environ.get("CHINWAG_HOME")
    _fill_store(homes["50 messages"], MESSAGES)
    if saved_home is None:
        os.environ.pop("CHINWAG_HOME", None)
    else:
        os.environ["CHINWAG_HOME"] = saved_home

    # A warm-up start, so that the first measured one is not the only one reading cold files.
    _child(["child-start"], _env(homes["empty"]))
    starts = {k: [] for k in homes}
    for rep in range(args.reps):
        for case in list(homes) if rep % 2 == 0 else list(reversed(homes)):
            t0, r = _child(["child-start"], _env(homes[case]))
            starts[case].append({"to_first_paint_s": r["painted_at"] - t0, "messages_shown": r["messages_shown"]})
            log(
                f"start ({case}): first paint after {starts[case][-1]['to_first_paint_s']:.2f}s, "
                f"{r['messages_shown']} message widgets"
            )

    model = common.tiny_model(context_length=args.tokens + 256)
    streams = []
    for rep in range(max(1, args.reps - 1)):
        home = Path(tempfile.mkdtemp(prefix="chinwag-bench-ui-stream-"))
        _t0, r = _child(["child-stream", str(model), str(args.tokens)], _env(home))
        streams.append(r)
        s = r["streaming"]
        s1 = r["streaming_first"]
        log(
            f"stream {rep}: {s['tokens']} tokens at {s['engine_decode_tps']:.0f} tok/s, max gap "
            f"{s['max_gap_ms']:.1f} ms (first reply after start {s1['max_gap_ms']:.1f} ms, {s1['max_gap_at']}; "
            f"idle {r['idle']['max_gap_ms']:.1f} ms), {s['renders_per_s']:.1f} renders/s"
        )

    summary = {
        "start": {
            case: {
                "to_first_paint_s": median([r["to_first_paint_s"] for r in rs]),
                "messages_shown": rs[0]["messages_shown"],
            }
            for case, rs in starts.items()
        },
        "streaming": {
            k: (median([r["streaming"][k] for r in streams]) if not isinstance(v, str) else v)
            for k, v in streams[0]["streaming"].items()
        },
        "streaming_first": {
            k: (median([r["streaming_first"][k] for r in streams]) if not isinstance(v, str) else v)
            for k, v in streams[0]["streaming_first"].items()
        },
        "idle": {k: median([r["idle"][k] for r in streams]) for k in streams[0]["idle"]},
    }
    common.save(
        "ui",
        {
            "params": {
                "reps": args.reps,
                "tokens": args.tokens,
                "probe_ms": PROBE_MS,
                "messages": MESSAGES,
                "qpa": "offscreen",
            },
            "starts": starts,
            "streams": streams,
            "summary": summary,
        },
        f"python -m bench.figures.ui --reps {args.reps} --tokens {args.tokens}",
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


def plot(d, res, path):
    plt = pyplot()
    s = d["summary"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
    cases = list(s["start"])
    for i, c in enumerate(cases):
        a1.bar(i, s["start"][c]["to_first_paint_s"], color=COLORS["chinwag"], alpha=0.8)
        a1.scatter(
            [i] * len(d["starts"][c]), [r["to_first_paint_s"] for r in d["starts"][c]], color="k", s=10, zorder=3
        )
    a1.set_xticks(range(len(cases)), [f"{c}" for c in cases])
    a1.set_ylabel("process start to first paint, s")
    a1.set_title("Cold start")
    labels = ["p50", "p99", "max"]
    keys = ["p50_gap_ms", "p99_gap_ms", "max_gap_ms"]
    modes = [("idle", "#7f7f7f", "idle")]
    if "streaming_first" in s:
        modes.append(("streaming_first", COLORS["mlx_lm"], "first reply after start"))
    modes.append(("streaming", COLORS["chinwag"], "a later reply"))
    width = 0.8 / len(modes)
    for j, (mode, color, label) in enumerate(modes):
        a2.bar(
            [i + (j - (len(modes) - 1) / 2) * width for i in range(3)],
            [s[mode][k] for k in keys],
            width,
            color=color,
            label=label,
        )
    a2.axhline(d["params"]["probe_ms"], color="k", lw=0.8, ls=":", label="timer interval")
    a2.set_xticks(range(3), labels)
    a2.set_ylabel("gap between 5 ms timer ticks, ms")
    a2.set_title(f"Event loop while streaming {int(s['streaming']['tokens'])} tokens")
    a2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(d, res):
    s, p = d["summary"], d["params"]
    st, idle, first = s["streaming"], s["idle"], s.get("streaming_first")
    starts = s["start"]

    def row(label, x):
        return [
            label,
            f(x["p50_gap_ms"]),
            f(x["p99_gap_ms"]),
            f(x["max_gap_ms"]),
            int(x["stalls_over_50ms"]),
            x.get("max_gap_at", ""),
            f(x["ttft_in_window_s"] * 1e3, 0) if "ttft_in_window_s" in x else "",
        ]

    rows = [row("idle", idle)]
    if first:
        rows.append(row("streaming, first reply after start", first))
    rows.append(row("streaming, a later reply", st))
    out = [
        f"Offscreen Qt (QT_QPA_PLATFORM=offscreen: no display on this machine), a fresh process and a throwaway "
        f"CHINWAG_HOME for every measurement. Cold start: from the parent's clock before it spawns "
        f"`python -m bench.ui_start` (which calls `app.gui.main.run_app` as `chinwag` does) to the main window's first "
        f"Paint event; {p['reps']} repetitions of each case, alternating. Streaming: `MainWindow(store, Engine())` "
        f"on the tiny model, replies of {p['tokens']} tokens sent through the composer (`Composer.submit`), with a "
        f"{p['probe_ms']} ms QTimer (precise) probing the GUI thread; two replies per window, each in a new "
        f"conversation (the first after start, then a later one), {len(d['streams'])} windows; the same probe over "
        f"3 s with the window idle for comparison.",
        "",
        table(
            ["cold start", "to first paint, s (median)", "message widgets built"],
            [[c, f(v["to_first_paint_s"]), v["messages_shown"]] for c, v in starts.items()],
        ),
        "",
        table(
            [
                "event loop",
                "p50 gap ms",
                "p99 gap ms",
                "longest stall (max gap) ms",
                "gaps > 50 ms",
                "longest stall was",
                "send to first token ms",
            ],
            rows,
        ),
        "",
        f"While streaming at {f(st['engine_decode_tps'], 0)} tok/s (engine), {f(st['deltas_per_s'], 0)} text deltas a "
        f"second reached the GUI thread and the streaming message re-rendered {f(st['renders_per_s'], 1)} times a "
        f"second (`ChatView` caps it at 30); the reply was {int(st['reply_chars']):,} characters. The longest stall "
        f"of the event loop during a reply was {f(st['max_gap_ms'], 1)} ms ({f(idle['max_gap_ms'], 1)} ms idle).",
    ]
    if first:
        out[-1] += (
            f" The first reply after start is different: one stall of {f(first['max_gap_ms'], 0)} ms, "
            f"{first.get('max_gap_at', '')}. The send itself (`Composer.submit`: store writes, widgets, the engine "
            f"call) took {f(first.get('submit_call_ms'), 0)} ms on the GUI thread, against "
            f"{f(st.get('submit_call_ms'), 0)} ms for a later reply; the rest was not isolated here (likely "
            "candidates: first-use work of the engine thread's first turn, such as the chat template's first "
            "rendering and lazy imports, which holds the GIL)."
        )
    out[-1] += (
        f" A 50-message conversation opens on its latest {starts.get('50 messages', {}).get('messages_shown', '?')} "
        f"messages and adds "
        f"{f((starts.get('50 messages', {}).get('to_first_paint_s', float('nan')) - starts.get('empty', {}).get('to_first_paint_s', float('nan'))) * 1e3, 0)} ms "
        "to the first paint."
    )
    return out


def headline(d, res):
    s = d["summary"]
    first = s.get("streaming_first")
    return [
        [
            "longest event-loop stall while streaming, ms",
            f(s["streaming"]["max_gap_ms"], 1),
            f"{f(s['streaming']['renders_per_s'], 0)} renders/s at {f(s['streaming']['engine_decode_tps'], 0)} tok/s"
            + (
                f"; first reply after start: one {f(first['max_gap_ms'], 0)} ms stall before its first token"
                if first
                else ""
            ),
        ],
        [
            "cold start to first paint, s (empty / 50 messages)",
            " / ".join(f(v["to_first_paint_s"]) for v in s["start"].values()),
            "",
        ],
    ]


FIGURE = Figure(name="ui", title="The window", section=section, plot=plot, headline=headline)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child-stream":
        child_stream(sys.argv[2], int(sys.argv[3]))
    else:
        main()
