"""Figure 5: the window. Cold start to the first paint of the main window (empty, and with a
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

    python -m bench.ui [--reps 3] [--tokens 1500]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench import common  # first: preloads OpenBLAS before mlx is imported
from bench.common import log, median, percentile

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
    conv = store.create_conversation(title="A long chat", model_id="smollm2-135m-instruct")
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
                model_id="smollm2-135m-instruct",
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
        cmd = [sys.executable, "-m", "bench.ui", *args]
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
        f"python -m bench.ui --reps {args.reps} --tokens {args.tokens}",
        started,
    )
    common.finish()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child-stream":
        child_stream(sys.argv[2], int(sys.argv[3]))
    else:
        main()
