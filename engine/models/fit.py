"""Whether a model fits this machine, from its folder alone: no weight is read and MLX is not
imported (`plan(folder, limit)` reads config.json and the safetensors headers). A model not
downloaded yet (the download dialog's catalogue) is judged by the same Plan, sized from its
parameter count and a few config.json figures (`estimated_plan`).

What a model needs here: its weights as this machine's load path holds them (on the CPU backend
engine/local/loading.py casts float16/bfloat16 to float32 and engine/local/blas.py may run a small
quantized model dequantized to float32, by engine/cpu.py's switches), a KV cache per token, and a working reserve. The limit is
`--memory-limit` / `CHINWAG_MEMORY_LIMIT`, else on Metal the recommended working set, elsewhere the
memory available now."""

import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import cpu
from engine.errors import ChinwagError, DoesNotFitError
from engine.types import KVQuantization

MINIMAL_CHAT_TOKENS = 2048  # the smallest chat worth loading a model for
WINDOW_RESERVE = 64  # positions a sliding window's cache keeps behind it (engine/context/window_cache.py)
RESERVE_BYTES = 256 << 20  # activations, the tokenizer, the interpreter: a working reserve
QUANT_GROUP = 64  # MLX's affine quantization: a scale and a bias per this many weights
DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "U32": 4,
    "I16": 2,
    "U16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "TIB": 1 << 40,
}


def ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def parse_memory_limit(text: str, where: str) -> int:
    """`6GB`, `6144MB`, `6GiB`, or `70%` of RAM, in bytes; a ChinwagError naming `where` otherwise."""
    value = text.strip()
    bad = ChinwagError(
        f"{where} must be a size such as 6GB, 6144MB or 6GiB, or a share of RAM such as 70%, got {text!r}"
    )
    if value.endswith("%"):
        try:
            share = float(value[:-1])
        except ValueError:
            raise bad from None
        if not 0 < share <= 100:
            raise ChinwagError(f"{where} must be a share of RAM above 0% and at most 100%, got {text!r}")
        return int(ram_bytes() * share / 100)
    match = _SIZE.match(value)
    if not match:
        raise bad
    n = int(float(match.group(1)) * _UNITS[(match.group(2) or "B").upper()])
    if n <= 0:
        raise ChinwagError(f"{where} must be more than 0 bytes, got {text!r}")
    return n


def available_bytes() -> int:
    """The memory this machine can give a model now: Metal's recommended working set on macOS,
    else MemAvailable from /proc/meminfo, else the physical RAM."""
    if sys.platform == "darwin":
        try:
            import mlx.core as mx  # only on macOS, where Metal says what a process may use

            return int(mx.metal.device_info()["max_recommended_working_set_size"])
        except Exception:  # noqa: BLE001 - no Metal (an Intel Mac): fall back to the RAM
            return ram_bytes()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return ram_bytes()


def default_limit(loaded_weight_bytes: int = 0) -> int:
    """The limit without a setting: what is available now, plus the weights of the model a load would
    replace (Session.load and the download dialog both ask here)."""
    return available_bytes() + loaded_weight_bytes


def _on_cpu_float32() -> bool:
    """Whether this machine's load path casts floats to float32 (the CPU backend: not Apple silicon)."""
    return (
        not (sys.platform == "darwin" and os.uname().machine == "arm64") and os.environ.get(cpu.FLOAT32_ENV, "1") != "0"
    )


@dataclass(frozen=True)
class Form:
    """How the load path holds a model's weights here (engine/local/loading.py)."""

    float32: bool  # floating weights cast to float32 (the CPU backend)
    dequantized: bool  # a quantized model run dequantized to float32 (OpenBLAS)

    def text(self) -> str:
        if self.dequantized:
            return "dequantized to float32"
        return "kept quantized" if self.float32 else "as stored, not cast to float32"


@dataclass(frozen=True)
class _Weights:
    loaded: int  # bytes with floats as `float32` says
    dequantized: int  # bytes once every quantized layer is float32
    bits: int  # the quantization's bits (0: not quantized)

    def usual_form(self, float32: bool) -> Form:
        """The form this machine's load path gives them (engine/local/loading.py, blas.py)."""
        return Form(float32, _runs_dequantized(float32, self.bits, self.dequantized))

    def bytes_in(self, form: Form) -> int:
        return self.dequantized if form.dequantized else self.loaded


def _weights(folder: Path, config: dict[str, Any], float32: bool) -> _Weights:
    """The folder's weight bytes from its safetensors headers."""
    from engine.models.folders import _safetensors_header

    quantization = config.get("quantization") or {}
    bits = int(quantization.get("bits", 0) or 0) if isinstance(quantization, dict) else 0
    loaded = dequantized = 0
    for path in sorted(folder.glob("*.safetensors")):
        header, why = _safetensors_header(path)
        if header is None:
            raise ChinwagError(f"cannot size the model in {folder}: {why}")
        for name, v in header.items():
            if name == "__metadata__" or not isinstance(v, dict):
                continue
            as_loaded, as_float32 = _tensor_bytes(name, v, float32, quantization, bits)
            loaded += as_loaded
            dequantized += as_float32
    return _Weights(loaded, dequantized, bits)


def _tensor_bytes(
    name: str, v: dict[str, Any], float32: bool, quantization: dict[str, Any], bits: int
) -> tuple[int, int]:
    """A tensor's bytes as loaded here, and once a quantized model is dequantized to float32 (then
    the quantization's scales and biases are gone)."""
    count = 1
    for d in v.get("shape", []):
        count *= int(d)
    size = DTYPE_BYTES.get(v.get("dtype", ""), 4)
    is_float = v.get("dtype") in ("F16", "BF16", "F32")
    loaded = count * (4 if float32 and is_float else size)
    if name.endswith((".scales", ".biases")) and bits:
        return loaded, 0
    if v.get("dtype") == "U32" and bits:
        own = quantization.get(name.rsplit(".", 1)[0])  # a mixed model's per-layer setting
        layer_bits = int(own.get("bits", bits)) if isinstance(own, dict) else bits
        return loaded, count * (32 // layer_bits) * 4
    return loaded, count * (4 if is_float else size)


def _estimated_weights(params: float, bits: int, float32: bool) -> _Weights:
    """`params` weights stored at `bits` (16: bf16, unquantized), for a model with no safetensors
    header at hand (not downloaded yet): as `_weights` counts a real folder's, with a scale and a
    bias per QUANT_GROUP weights."""
    floats = 4 if float32 else 2
    if bits >= 16:
        return _Weights(int(params * floats), int(params * 4), 0)
    return _Weights(int(params * bits / 8 + params / QUANT_GROUP * 2 * floats), int(params * 4), bits)


def estimated_weight_bytes(params: float, bits: int) -> int:
    """The bytes `params` weights stored at `bits` take once loaded here as usual: floats cast to
    float32 on the CPU and a small quantized model dequantized where this machine's path would."""
    float32 = _on_cpu_float32()
    w = _estimated_weights(params, bits, float32)
    return w.bytes_in(w.usual_form(float32))


def _runs_dequantized(float32: bool, bits: int, dequantized: int) -> bool:
    """Whether a model of `bits` runs here dequantized to float32 (`dequantized` bytes), as
    engine/local/blas.py should_dequantize decides: on OpenBLAS, when it is small enough."""
    choice = os.environ.get(cpu.DEQUANTIZE_ENV, "")
    if not (float32 and bits) or choice == "0":
        return False
    return choice == "1" or (cpu.openblas_expected() and dequantized <= ram_bytes() * cpu.DEQUANTIZE_MAX_RAM_FRACTION)


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, **(config.get("text_config") or {})}


def cache_bytes_per_token(config: dict[str, Any], kv: KVQuantization | None, float32: bool) -> tuple[float, int]:
    """(bytes per token of the layers that keep every token, fixed bytes: windows at their length
    and recurrent state), for a chat of any length."""
    c = _text_config(config)
    layers = int(c.get("num_hidden_layers", 0) or 0)
    heads = int(c.get("num_attention_heads", 1) or 1)
    kv_heads = int(c.get("num_key_value_heads", heads) or heads)
    head_dim = int(c.get("head_dim") or (int(c.get("hidden_size", 0) or 0) // heads))
    dtype = 4 if float32 else 2
    window = int(c.get("sliding_window", 0) or 0)
    full, sliding, recurrent = _layer_counts(c, layers, window)
    state = recurrent * int(c.get("hidden_size", 0) or 0) * 4 * dtype  # a rough fixed state per layer
    held = window + 2 * WINDOW_RESERVE if window else 0  # what a window's cache holds between writes
    per_layer = _attention_bytes_per_token(c, kv_heads * head_dim, kv, dtype)
    return full * per_layer, int(sliding * held * 2 * kv_heads * head_dim * dtype + state)


def _attention_bytes_per_token(c: dict[str, Any], kv_width: int, kv: KVQuantization | None, dtype: int) -> float:
    """What a full-attention layer's cache holds per token: keys and values of `kv_width` (heads x
    head dim), quantized or not, or a latent and a rope key at full precision (latent attention)."""
    if c.get("kv_lora_rank"):
        return (int(c["kv_lora_rank"]) + int(c.get("qk_rope_head_dim", 0) or 0)) * dtype
    per_value = kv.bits / 8 + 2 * dtype / kv.group_size if kv else dtype
    return 2 * kv_width * per_value


def _layer_counts(c: dict[str, Any], layers: int, window: int) -> tuple[int, int, int]:
    """How many layers are full attention, sliding-window attention and recurrent (from `layer_types`,
    or a sliding window's pattern; without either, every layer is full attention)."""
    kinds = c.get("layer_types") or []
    if not kinds and window and c.get("sliding_window_pattern"):
        pattern = int(c["sliding_window_pattern"])
        kinds = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    if not kinds:
        return layers, 0, 0
    full = sum(1 for k in kinds if "full" in k or k == "attention")
    sliding = sum(1 for k in kinds if "sliding" in k)
    return full, sliding, max(0, len(kinds) - full - sliding)


@dataclass(frozen=True)
class Plan:
    name: str
    weights: int  # bytes, as loaded here
    per_token: float  # bytes of cache per token
    fixed: int  # cache bytes whatever the length (windows, recurrent state)
    reserve: int
    limit: int
    form: Form = Form(float32=False, dequantized=False)
    leaner: bool = False  # the form is leaner than this machine's usual one, which would not fit

    def needs(self, tokens: int) -> int:
        return int(self.weights + self.reserve + self.fixed + self.per_token * tokens)

    @property
    def longest_context(self) -> int:
        room = self.limit - self.weights - self.reserve - self.fixed
        return max(0, int(room // self.per_token)) if self.per_token else (1 << 40 if room >= 0 else 0)

    @property
    def cache_budget(self) -> int:
        """What the limit leaves every conversation's cache: the limit less the weights and the reserve."""
        return max(
            self.needs(MINIMAL_CHAT_TOKENS) - self.weights - self.reserve, self.limit - self.weights - self.reserve
        )

    def refusal(self, kv: KVQuantization | None) -> DoesNotFitError | None:
        """Why the model does not fit the limit (None when its weights and a minimal chat fit): what it
        needs and what there is; the error's advice says what to do."""
        need = self.needs(MINIMAL_CHAT_TOKENS)
        if need <= self.limit:
            return None
        held = f" {self.form.text()}" if self.leaner else ""
        return DoesNotFitError(
            f"{self.name} does not fit in memory: it needs {size_text(need)} (weights {size_text(self.weights)}{held}"
            f" and a {MINIMAL_CHAT_TOKENS}-token chat), and there is {size_text(self.limit)}",
            quantized=kv is not None,
        )

    def reason(self, kv: KVQuantization | None, settings: tuple[str, str] = DoesNotFitError.CLI) -> str:
        """The refusal's line ("" when it fits), naming `settings` (the KV cache's and the limit's)."""
        refused = self.refusal(kv)
        return refused.advice(*settings) if refused else ""

    def check(self, kv: KVQuantization | None) -> None:
        """Refuse, in one line, a model whose weights and a minimal chat do not fit the limit."""
        refused = self.refusal(kv)
        if refused:
            raise refused


def size_text(n: float) -> str:
    """A size as the fit messages write it: decimal units, as --memory-limit 6GB reads them."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def plan(folder: str | Path, limit: int | None, kv: KVQuantization | None = None, name: str = "") -> Plan:
    """What the model in `folder` needs here against `limit` (None: this machine's available memory),
    in the form the load path holds it: the usual one, or where that does not fit the limit the first
    leaner one that does (quantized weights not dequantized, then floats as stored, not cast to float32)."""
    folder = Path(folder)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ChinwagError(f"cannot read {folder / 'config.json'}: {e}") from e
    if not isinstance(config, dict):
        raise ChinwagError(f"{folder / 'config.json'} is not a JSON object")
    return _choose(name or folder.name, config, kv, limit, lambda float32: _weights(folder, config, float32))


def _choose(
    name: str,
    config: dict[str, Any],
    kv: KVQuantization | None,
    limit: int | None,
    weights: Callable[[bool], _Weights],
) -> Plan:
    """The usual form's plan, or where it does not fit `limit` (None: the memory available now) the
    leanest form's; `weights(float32)` sizes the weights with floats cast to float32 or not."""
    room = available_bytes() if limit is None else limit
    float32 = _on_cpu_float32()
    w = weights(float32)
    usual = w.usual_form(float32)
    plans = [_plan_in(usual, w, config, kv, room, name)]
    if usual.dequantized:  # the quantized weights, with float32 norms and scales
        plans.append(_plan_in(Form(float32, False), w, config, kv, room, name))
    elif float32 and not w.bits:  # floats as stored: slower here, half the memory
        plans.append(_plan_in(Form(False, False), weights(False), config, kv, room, name))
    fitting = [p for p in plans if p.needs(MINIMAL_CHAT_TOKENS) <= p.limit]
    if fitting and fitting[0] is plans[0]:
        return plans[0]
    # The leanest form that fits; or, when none does, the leanest, whose check says what is missing.
    return dataclasses.replace(fitting[0] if fitting else plans[-1], leaner=len(plans) > 1)


def _plan_in(form: Form, w: _Weights, config: dict[str, Any], kv: KVQuantization | None, limit: int, name: str) -> Plan:
    per_token, fixed = cache_bytes_per_token(config, kv, form.float32)
    return Plan(name, w.bytes_in(form), per_token, fixed, RESERVE_BYTES, limit, form)


def figures_config(figures: dict[str, Any], other_layers: str) -> dict[str, Any]:
    """A config.json as cache_bytes_per_token reads it, from a catalogue entry's figures: config.json's
    own keys (num_hidden_layers, num_key_value_heads, head_dim, hidden_size, sliding_window,
    kv_lora_rank, qk_rope_head_dim), plus `full_attention_layers`: how many layers keep every token,
    the rest being `other_layers` ("sliding_attention" or "linear_attention")."""
    config = {k: v for k, v in figures.items() if k != "full_attention_layers"}
    full = figures.get("full_attention_layers")
    if full is not None:
        layers = int(figures.get("num_hidden_layers", 0) or 0)
        config["layer_types"] = ["full_attention"] * int(full) + [other_layers] * max(0, layers - int(full))
    return config


def estimated_plan(
    name: str, params: float, bits: int, config: dict[str, Any], limit: int | None, kv: KVQuantization | None
) -> Plan:
    """The Plan of a model not downloaded yet: `params` weights at `bits` and the cache `config`
    describes (figures_config), against `limit` (None: this machine's available memory), in the form
    a load would choose (plan)."""
    return _choose(name, config, kv, limit, lambda float32: _estimated_weights(params, bits, float32))


def fit_reason(path: str, limit: int | None, kv: KVQuantization | None, name: str = "") -> str:
    """Why the MLX model folder at `path` would be refused here (Plan.check's line), or "" when it fits
    or cannot be sized without loading it (a GGUF not imported yet, a server's model)."""
    folder = Path(path) if path else None
    if folder is None or not (folder / "config.json").is_file():
        return ""
    try:
        plan(folder, limit, kv, name).check(kv)
    except ChinwagError as e:
        return str(e)
    return ""
