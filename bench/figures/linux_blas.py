"""Linux CPU. The mlx[cpu] wheel's bundled reference BLAS against the system OpenBLAS
preloaded by engine/cpu.py, with the starter model kept quantized (float32 parameters) or
dequantized to float32: the engine's own switches, CHINWAG_NO_OPENBLAS=1 and
CHINWAG_CPU_DEQUANTIZE=0/1. Since 6eafe4a the engine dequantizes small models by itself
when OpenBLAS is loaded (the last configuration); without OpenBLAS it runs the first.

Each configuration runs in its own subprocess (the BLAS must be chosen before mlx is
imported); the configurations alternate within every repetition. A child measures a
1024x1024 float32 matmul, then the Engine end to end on the starter model: load, one chat
turn (a ~100-token prompt, greedy, N new tokens): TTFT, prefill and decode tok/s as the
engine's TurnStats report them, and peak RSS.

    python -m bench.figures.linux_blas [--reps 3] [--tokens 24]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from bench.reporting import COLORS, Figure, f, mb, pyplot, table
from engine.models.folders import STARTER_ID

CONFIGS = {
    "reference BLAS, quantized": {"openblas": False, "dequantize": False},
    "OpenBLAS, quantized": {"openblas": True, "dequantize": False},
    "reference BLAS, dequantized f32": {"openblas": False, "dequantize": True},
    "OpenBLAS, dequantized f32": {"openblas": True, "dequantize": True},
}
PROMPT = (
    "Here are my notes from the trip. We left early on Monday, took the train along the coast, "
    "stopped in two small towns for lunch and coffee, walked up to the old castle in the afternoon, "
    "and reached the city by night. On Tuesday it rained, so we visited the museum and the market. "
    "Please turn these notes into a short, friendly travel diary entry."
)


def child(tokens: int) -> dict:
    """The parent sets CHINWAG_NO_OPENBLAS and CHINWAG_CPU_DEQUANTIZE: the engine's own switches."""
    from engine import cpu

    cpu.preload_openblas()  # unless CHINWAG_NO_OPENBLAS=1
    import asyncio

    import mlx.core as mx

    out = {"blas": cpu.openblas_info()}
    a = mx.random.normal((1024, 1024))
    b = mx.random.normal((1024, 1024))
    mx.eval(a, b)
    mx.eval(a @ b)
    times = []
    for _ in range(3):
        t = time.perf_counter()
        mx.eval(a @ b)
        times.append(time.perf_counter() - t)
    out["matmul_1024_ms"] = sorted(times)[1] * 1e3

    from bench.common import timed_chat
    from engine import Engine, GenerationParams

    async def run():
        engine = Engine()
        t = time.perf_counter()
        await engine.load_model(STARTER_ID)
        out["load_s"] = time.perf_counter() - t
        model = engine._local.session.model  # read only: how the engine loaded it
        out["quantized"] = any(hasattr(m, "bits") for _, m in model.named_modules())
        warm = ([{"role": "user", "content": "Hi"}], GenerationParams(temperature=0.0, max_tokens=2))
        measured = ([{"role": "user", "content": PROMPT}], GenerationParams(temperature=0.0, max_tokens=tokens))
        for label, (messages, params) in (("warm-up", warm), ("measured", measured)):
            ttft, _, stats = await timed_chat(engine, f"blas-{label}", messages, params)
            await engine.forget(f"blas-{label}")
        out.update(
            ttft_s=ttft,
            prefill_tps=stats.prefill_tps,
            decode_tps=stats.decode_tps,
            prompt_tokens=stats.prompt_tokens,
            generated=stats.generated_tokens,
            ids=list(stats.reply_ids),
        )
        await engine.close()

    asyncio.run(run())
    import resource

    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return out


def main(argv=None):
    from bench import common
    from bench.common import log, median

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=common.reps(3))
    p.add_argument("--tokens", type=int, default=8 if common.QUICK else 24)
    args = p.parse_args(argv)
    started = time.perf_counter()
    common.starter_path()  # import the starter once, outside the timed children

    from engine import cpu

    names = list(CONFIGS)
    if not cpu.openblas_info()["loaded"]:
        log(f"no OpenBLAS ({cpu.openblas_info()['reason']}): measuring the reference BLAS only")
        names = [n for n in names if not CONFIGS[n]["openblas"]]
    runs = {name: [] for name in names}
    for rep in range(args.reps):
        order = names if rep % 2 == 0 else list(reversed(names))
        for name in order:
            cfg = CONFIGS[name]
            env = dict(os.environ)
            env.pop("CHINWAG_NO_OPENBLAS", None)
            if not cfg["openblas"]:
                env["CHINWAG_NO_OPENBLAS"] = "1"
            env["CHINWAG_CPU_DEQUANTIZE"] = "1" if cfg["dequantize"] else "0"
            cmd = [sys.executable, "-m", "bench.figures.linux_blas", "--child", "--tokens", str(args.tokens)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=common.ROOT)
            lines = [l for l in proc.stdout.splitlines() if l.startswith("{")]
            if proc.returncode != 0 or not lines:
                raise RuntimeError(f"{name} failed ({proc.returncode}): {proc.stderr[-2000:]}")
            r = json.loads(lines[-1])
            if r["quantized"] == cfg["dequantize"]:
                raise RuntimeError(
                    f"{name}: the engine loaded the model {'quantized' if r['quantized'] else 'dequantized'}"
                )
            r["rep"] = rep
            runs[name].append(r)
            log(
                f"rep {rep} {name}: matmul {r['matmul_1024_ms']:.1f} ms, ttft {r['ttft_s']:.2f}s, prefill "
                f"{r['prefill_tps']:.1f} tok/s, decode {r['decode_tps']:.2f} tok/s, rss {r['peak_rss_bytes'] / 2**20:.0f} MiB"
            )

    reference = runs[names[0]][0]["ids"]
    summary = {}
    for name, rs in runs.items():
        summary[name] = {
            k: median([r[k] for r in rs])
            for k in ("matmul_1024_ms", "ttft_s", "prefill_tps", "decode_tps", "load_s", "peak_rss_bytes")
        }
        summary[name]["blas_core"] = rs[0]["blas"].get("core", "") if rs[0]["blas"]["loaded"] else "reference"
        summary[name]["same_tokens_as_reference"] = all(r["ids"] == reference for r in rs)
        summary[name]["prompt_tokens"] = rs[0]["prompt_tokens"]
    base = summary[names[0]]
    for name in names:
        s = summary[name]
        s["matmul_speedup"] = base["matmul_1024_ms"] / s["matmul_1024_ms"]
        s["prefill_speedup"] = s["prefill_tps"] / base["prefill_tps"]
        s["decode_speedup"] = s["decode_tps"] / base["decode_tps"]
        s["ttft_speedup"] = base["ttft_s"] / s["ttft_s"]
    for rs in runs.values():
        for r in rs:
            r.pop("ids")
    common.save(
        "linux_blas",
        {
            "params": {"reps": args.reps, "tokens": args.tokens, "prompt": PROMPT},
            "runs": runs,
            "summary": summary,
            "openblas_installed": any(r["blas"]["loaded"] for rs in runs.values() for r in rs),
        },
        f"python -m bench.figures.linux_blas --reps {args.reps} --tokens {args.tokens}",
        started,
    )
    common.finish()


# --- the report: docs/BENCHMARKS.md's section and plot ---------------------------------------------


BEST = "OpenBLAS, dequantized f32"


def plot(d, res, path):
    plt = pyplot()
    s = d["summary"]
    names = list(s)
    fig, axes = plt.subplots(1, 3, figsize=(11, 4))
    short = [n.replace(", ", "\n").replace(" f32", "\nfloat32") for n in names]
    colors = ["#7f7f7f", "#aec7e8", "#ffbb78", COLORS["proposed"]]
    for ax, key, title in (
        (axes[0], "prefill_tps", "prefill tokens/s (log)"),
        (axes[1], "decode_tps", "decode tokens/s"),
        (axes[2], "ttft_s", "time to first token, s (log)"),
    ):
        ax.bar(range(len(names)), [s[n][key] for n in names], color=colors[: len(names)])
        for i, n in enumerate(names):
            ax.scatter([i] * len(d["runs"][n]), [r[key] for r in d["runs"][n]], color="k", s=8, zorder=3)
        ax.set_xticks(range(len(names)), short, fontsize=7)
        ax.set_title(title)
        if "log" in title:
            ax.set_yscale("log")
    fig.suptitle(f"Starter model through the Engine, {s[names[0]]['prompt_tokens']}-token prompt")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def section(d, res):
    s = d["summary"]
    names = list(s)
    base = s[names[0]]
    m = d["machine"]
    rows = [
        [
            n,
            s[n]["blas_core"],
            f(s[n]["matmul_1024_ms"], 1),
            f(s[n]["prefill_tps"], 1),
            f(s[n]["decode_tps"], 2),
            f(s[n]["ttft_s"]),
            f(s[n]["load_s"], 1),
            mb(s[n]["peak_rss_bytes"]),
            "yes" if s[n]["same_tokens_as_reference"] else "no",
        ]
        for n in names
    ]
    core = m["blas"].get("OPENBLAS_CORETYPE") or "not set"
    out = [
        f"The mlx[cpu] wheel links the reference (netlib) BLAS it bundles (`mlx_cpu.libs/libblas-*.so.3.10.0`); "
        f"MLX calls `cblas_sgemm` through the dynamic linker, so an OpenBLAS loaded with RTLD_GLOBAL before mlx "
        f"is imported takes over (`engine/cpu.py`, `preload_openblas()`). Up to four configurations, each in its "
        f"own subprocess, alternating, {d['params']['reps']} repetitions: the BLAS (`CHINWAG_NO_OPENBLAS=1` or "
        f"not), and the starter model kept quantized (float32 parameters) or dequantized to float32 "
        f"(`CHINWAG_CPU_DEQUANTIZE=0`/`1`): the engine's own switches. Since 6eafe4a the engine picks the last "
        f"row by itself when OpenBLAS is loaded, and the first without it. The Engine end to end: load, a warm-up turn, then one "
        f"turn with a {base['prompt_tokens']}-token prompt and {d['params']['tokens']} greedy tokens; the "
        f"engine's own prefill and decode rates (TurnStats).",
        "",
        table(
            [
                "configuration",
                "BLAS core",
                "1024² f32 matmul ms",
                "prefill tok/s",
                "decode tok/s",
                "TTFT s",
                "load s",
                "peak RSS",
                "same tokens",
            ],
            rows,
        ),
        "",
    ]
    deq = s.get("reference BLAS, dequantized f32")
    if BEST not in s:
        out.append(
            "**No system OpenBLAS was found on this machine**, so only the reference BLAS was measured. "
            "Install it (Debian/Ubuntu: `apt-get install libopenblas0-pthread`) and rerun "
            "`python -m bench.figures.linux_blas`."
        )
    else:
        best, ob = s[BEST], s.get("OpenBLAS, quantized")
        out.append(
            (
                f"OpenBLAS alone changes little for the quantized model: quantized matmuls do not go through BLAS "
                f"(prefill {ob['prefill_speedup']:.2f}x, decode {ob['decode_speedup']:.2f}x). "
                if ob
                else ""
            )
            + (
                f"Dequantized without OpenBLAS changes little too (prefill {deq['prefill_speedup']:.2f}x, decode "
                f"{deq['decode_speedup']:.2f}x): the reference BLAS is as slow as the quantized kernels. "
                if deq
                else ""
            )
            + f"**OpenBLAS with the model dequantized to float32: prefill {best['prefill_speedup']:.1f}x, decode "
            f"{best['decode_speedup']:.2f}x, time to first token {best['ttft_speedup']:.1f}x faster** "
            f"({f(base['ttft_s'])} s → {f(best['ttft_s'])} s), at {mb(best['peak_rss_bytes'] - base['peak_rss_bytes'])} "
            f"more memory (the 135M parameters in float32). The 1024² matmul: {base['matmul_1024_ms']:.0f} ms → "
            f"{best['matmul_1024_ms']:.0f} ms ({best['matmul_speedup']:.0f}x). "
            + (
                "The generated tokens were the same in all configurations."
                if all(s[n]["same_tokens_as_reference"] for n in names)
                else "The generated tokens differed between configurations: see the table."
            )
        )
    out += [
        "",
        f"OpenBLAS here: {m['blas'].get('config', 'not loaded')}; OPENBLAS_CORETYPE: {core}; "
        f"OPENBLAS_L2_SIZE: {m['blas'].get('OPENBLAS_L2_SIZE') or 'not set'} (recorded from the environment, never "
        f"changed). OpenBLAS is not a Python dependency: on Debian/Ubuntu `apt-get install libopenblas0-pthread` "
        f"(Fedora: `openblas-threads`). A machine without it (CI, a fresh clone) keeps the bundled BLAS and this "
        f"figure's first row; the machine table at the top says which BLAS a run had.",
    ]
    return out


def headline(d, res):
    s = d["summary"]
    names = list(s)
    if BEST not in s:
        return [["OpenBLAS + dequantized f32", "not measured", "no system OpenBLAS on this machine"]]
    b = s[BEST]
    return [
        [
            "OpenBLAS + dequantized f32 vs reference BLAS + quantized: prefill / decode / TTFT",
            f"**{b['prefill_speedup']:.1f}x / {b['decode_speedup']:.2f}x / {b['ttft_speedup']:.1f}x**",
            f"{f(s[names[0]]['prefill_tps'], 1)} → {f(b['prefill_tps'], 1)} prefill tok/s",
        ]
    ]


FIGURE = Figure(
    name="linux_blas", title="Linux CPU: BLAS and dequantizing", section=section, plot=plot, headline=headline
)


if __name__ == "__main__":
    if "--child" in sys.argv:
        tokens = int(sys.argv[sys.argv.index("--tokens") + 1])
        print(json.dumps(child(tokens)), flush=True)
        os._exit(0)
    main()
