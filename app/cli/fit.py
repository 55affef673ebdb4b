"""The flags that fit a model to this Mac, shared by `chat`, `replay` and `serve`: the KV cache's
quantization (`--kv-bits`, `--kv-group-size`) and the memory limit (`--memory-limit`,
`CHINWAG_MEMORY_LIMIT`)."""

import argparse
import os
from typing import Any

from engine.errors import ChinwagError
from engine.types import DEFAULT_KV_GROUP_SIZE, KV_BITS, KV_GROUP_SIZES, KVQuantization, ModelInfo

MEMORY_LIMIT_ENV = "CHINWAG_MEMORY_LIMIT"


def _whole(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kv-bits",
        type=_whole,
        default=None,
        metavar="BITS",
        help=f"store the KV cache at this many bits per value ({', '.join(map(str, KV_BITS))}; default: full precision)",
    )
    p.add_argument(
        "--kv-group-size",
        type=_whole,
        default=None,
        metavar="N",
        help=f"values per quantization group with --kv-bits ({', '.join(map(str, KV_GROUP_SIZES))};"
        f" default: {DEFAULT_KV_GROUP_SIZE})",
    )
    p.add_argument(
        "--memory-limit",
        default=None,
        metavar="SIZE",
        help=f"the memory Chinwag may use: 6GB, 6144MB, 6GiB or a share of RAM such as 70%%"
        f" (default: ${MEMORY_LIMIT_ENV}, else what this machine has available)",
    )


def kv_quantization(args: argparse.Namespace) -> KVQuantization | None:
    """The KV quantization the flags ask for; a bad value raises a one-line ChinwagError."""
    if args.kv_bits is None:
        if args.kv_group_size is not None:
            raise ChinwagError(f"--kv-group-size {args.kv_group_size} needs --kv-bits (the cache is at full precision)")
        return None
    return KVQuantization(args.kv_bits, DEFAULT_KV_GROUP_SIZE if args.kv_group_size is None else args.kv_group_size)


def memory_limit(args: argparse.Namespace) -> int | None:
    """The memory limit in bytes from --memory-limit, else $CHINWAG_MEMORY_LIMIT; None: this machine's."""
    from engine.models.fit import parse_memory_limit

    if args.memory_limit is not None:
        return parse_memory_limit(args.memory_limit, "--memory-limit")
    env = os.environ.get(MEMORY_LIMIT_ENV)
    if env is not None and env.strip():
        return parse_memory_limit(env, MEMORY_LIMIT_ENV)
    return None


def engine_options(args: argparse.Namespace) -> dict[str, Any]:
    """The Engine's keyword arguments for these flags (checked: one line for a bad value)."""
    return {"kv_quantization": kv_quantization(args), "memory_limit_bytes": memory_limit(args)}


def model_fit(
    path: str, context_length: int, limit: int | None, kv: KVQuantization | None, name: str = ""
) -> dict[str, Any] | None:
    """What a local model folder needs here (`chinwag models --json`): its weights' bytes, the cache's
    bytes per token, the longest context that fits the limit, and why a load would refuse it
    ("reason", Plan.check's line; "" when it fits); None when it cannot be sized."""
    from pathlib import Path

    from engine.models.fit import plan

    if not path or not (Path(path) / "config.json").is_file():
        return None  # a server's model, or one not imported yet
    try:
        p = plan(path, limit, kv, name)
    except ChinwagError:
        return None
    longest = p.longest_context
    return {
        "weight_bytes": p.weights,
        "cache_bytes_per_token": p.per_token,
        "fixed_cache_bytes": p.fixed,
        "reserve_bytes": p.reserve,
        "memory_limit_bytes": p.limit,
        "longest_context": min(longest, context_length) if context_length else longest,
        "reason": p.reason(kv),
    }


def context_note(info: ModelInfo) -> str:
    """'context 12,288 of 32,768 tokens: memory ...' when the memory limit caps a loaded model's context."""
    if not info.memory_context or info.memory_context >= info.context_length:
        return ""
    return (
        f"context {info.memory_context:,} of {info.context_length:,} tokens: memory"
        " (a higher --memory-limit or --kv-bits 8 or 4 holds more)"
    )
