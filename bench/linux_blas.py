"""Figure 6: Linux CPU. The mlx[cpu] wheel's bundled reference BLAS against the system OpenBLAS
preloaded by engine/local/blas.py, with the starter model kept quantized (float32 parameters) or
dequantized to float32: the engine's own switches, CHINWAG_NO_OPENBLAS=1 and
CHINWAG_CPU_DEQUANTIZE=0/1. Since 6eafe4a the engine dequantizes small models by itself
when OpenBLAS is loaded (the last configuration); without OpenBLAS it runs the first.

Each configuration runs in its own subprocess (the BLAS must be chosen before mlx is
imported); the configurations alternate within every repetition. A child measures a
1024x1024 float32 matmul, then the Engine end to end on the starter model: load, one chat
turn (a ~100-token prompt, greedy, N new tokens): TTFT, prefill and decode tok/s as the
engine's TurnStats report them, and peak RSS.

    python -m bench.linux_blas [--reps 3] [--tokens 24]
"""

import argparse
import json
import os
import subprocess
import sys
import time

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
    from engine.local import blas

    blas.preload_openblas()  # unless CHINWAG_NO_OPENBLAS=1
    import asyncio

    import mlx.core as mx

    out = {"blas": blas.openblas_info()}
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
    from engine.models import registry

    async def run():
        engine = Engine()
        t = time.perf_counter()
        await engine.load_model(registry.STARTER_ID)
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

    from engine.local import blas

    names = list(CONFIGS)
    if not blas.openblas_info()["loaded"]:
        log(f"no OpenBLAS ({blas.openblas_info()['reason']}): measuring the reference BLAS only")
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
            cmd = [sys.executable, "-m", "bench.linux_blas", "--child", "--tokens", str(args.tokens)]
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
        f"python -m bench.linux_blas --reps {args.reps} --tokens {args.tokens}",
        started,
    )
    common.finish()


if __name__ == "__main__":
    if "--child" in sys.argv:
        tokens = int(sys.argv[sys.argv.index("--tokens") + 1])
        print(json.dumps(child(tokens)), flush=True)
        os._exit(0)
    main()
