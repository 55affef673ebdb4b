"""A conversation's saved KV cache file: written with a checksum, read back as untrusted input.

A file in kv/ may be cut off or damaged, edited, replaced by a symlink or a named pipe, or
written for other weights. It is used only if every check passes: a regular file, opened
without following a link or blocking; no larger than a cache of the loaded model can be; its
format, layer count, shapes and dtype those of the loaded model; its checksum (sha256 of the
metadata and a CRC-32 of every tensor's bytes) matching; its ids in the vocabulary; its History well formed
and agreeing with its ids. Otherwise `UnusableCache` says why in one line and the caller
re-reads the history. The capacity reserved is derived from the tokens held, never read.
Every cache kind is saved (engine/context/kinds.py): a plain layer's keys and values, a window's
held positions (its start derived from the ids), recurrent state, and each checkpoint's copies;
what each leaf must hold is probed from the loaded model (`LeafSpec`), never read from the file.
Runs on the engine thread, but for `Snapshot.write`, which calls no MLX and runs on any thread.
"""

import hashlib
import hmac
import json
import os
import stat
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList

from engine.atomic import describe_kind
from engine.context import kinds
from engine.context.checkpoints import MAX_CHECKPOINTS
from engine.context.conversation import ConversationCache, initial_capacity
from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.context.prompt import ROLES, History, Span
from engine.context.quantized_cache import QuantizedContiguousKVCache
from engine.context.window_cache import DEFAULT_RESERVE, WindowedKVCache
from engine.types import KVQuantization

FORMAT = "chinwag-kv-3"
# A window holds at most its size, twice its reserve and one prefill chunk (engine/local/generation.py).
WINDOW_SLACK = 2 * DEFAULT_RESERVE + 1024
# Room for the History's JSON (every message's text) besides the tensors.
MAX_METADATA_BYTES = 64 << 20
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class UnusableCache(Exception):
    """A saved cache that must not be used; the message says why, in one line."""


@dataclass(frozen=True)
class LeafSpec:
    """What one leaf cache of the loaded model holds: its kind, shapes and dtypes."""

    kind: str  # "plain", "quantized", "window" or "recurrent"
    keys: tuple[int, ...] = ()  # (heads, dim) of an attention leaf's keys, and of its values
    values: tuple[int, ...] = ()
    window: int = 0
    states: tuple[tuple[int, ...] | None, ...] = ()  # a recurrent leaf's state shapes (None: an entry left empty)
    dtypes: tuple[str | None, ...] = ()  # of keys and values, or of each state entry
    bits: int = 0  # a quantized leaf's settings
    group_size: int = 0

    @property
    def held_back(self) -> bool:
        return self.kind != "plain"


# A LeafSpec per leaf, and for each layer how many leaves its CacheList holds (None: one leaf).
Specs = tuple[list[LeafSpec], list[int | None]]


@dataclass
class CacheLayout:
    """What a saved cache must hold to be used with the loaded model."""

    shapes: list[
        tuple[int, ...]
    ]  # (kv heads, head dim) of each layer of a plain-attention model ([] if `specs_probe` says)
    vocab_size: int
    max_tokens: int  # the context length
    probe: Callable[[], mx.Dtype]  # the dtype the model writes into its cache
    specs_probe: Callable[[], Specs] | None = None  # (LeafSpec per leaf, leaves per layer or None)
    _dtype: mx.Dtype | None = None
    _specs: Specs | None = None

    @property
    def dtype(self) -> mx.Dtype:
        if self._dtype is None:
            try:
                self._dtype = self.probe()
            except Exception as e:  # noqa: BLE001 - an architecture the probe cannot drive: its caches are not used
                raise UnusableCache(f"the dtype of this model's cache is unknown ({_one_line(e)})") from None
        return self._dtype

    def _probed(self) -> Specs:
        if self._specs is None:
            if self.specs_probe is None:
                dtype = str(self.dtype)
                specs = [LeafSpec("plain", s, s, dtypes=(dtype, dtype)) for s in self.shapes]
                self._specs = (specs, [None] * len(specs))
            else:
                try:
                    self._specs = self.specs_probe()
                except Exception as e:  # noqa: BLE001 - as for the dtype: this model's caches are not used
                    raise UnusableCache(f"the shape of this model's cache is unknown ({_one_line(e)})") from None
        return self._specs

    @property
    def specs(self) -> list[LeafSpec]:
        return self._probed()[0]

    @property
    def groups(self) -> list[int | None]:
        """For each layer, how many leaves its CacheList holds (None: the layer is one leaf)."""
        return self._probed()[1]

    @property
    def max_file_bytes(self) -> int:
        per_token, fixed = 4, 0  # the id
        for spec in self.specs:
            if spec.kind == "plain":
                per_token += (_prod(spec.keys) + _prod(spec.values)) * 4  # float32 at most
            elif spec.kind == "quantized":
                per_token += sum(_prod(s) for s in spec.states if s is not None) * 4
            elif spec.kind == "window":
                fixed += (_prod(spec.keys) + _prod(spec.values)) * 4 * (spec.window + WINDOW_SLACK)
            else:
                fixed += sum(_prod(s) for s in spec.states if s) * 4
        return per_token * self.max_tokens + fixed * (1 + MAX_CHECKPOINTS) + MAX_METADATA_BYTES


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def layout_of(model: Any, context_length: int, quant: KVQuantization | None = None) -> CacheLayout | None:
    """The layout a saved cache of `model` has; None for models whose caches are not saved."""
    vocab = _vocab_size(model)
    if not vocab or context_length < 1:
        return None

    def probed() -> ConversationCache:
        # A one-token forward builds a lazy graph (nothing is computed): the shapes and dtypes the cache takes.
        conv = ConversationCache.create(model, 1, quant)
        model(mx.array([[0]], dtype=mx.int32), cache=conv.layers)
        return conv

    def probe() -> mx.Dtype:
        for leaf in probed().leaves():
            if kinds.trims_exactly(leaf):
                return leaf.dtype
        return mx.float32

    def specs_probe() -> Specs:
        conv = probed()
        groups = [len(list(kinds.leaves([c]))) if isinstance(c, CacheList) else None for c in conv.layers]
        return [_spec(leaf) for leaf in conv.leaves()], groups

    return CacheLayout([], vocab, context_length, probe, specs_probe)


def _spec(leaf: Any) -> LeafSpec:
    if isinstance(leaf, QuantizedContiguousKVCache):  # each part's (heads, last dim), keys' then values'
        parts = [*leaf.keys, *leaf.values]
        return LeafSpec(
            "quantized",
            states=tuple((a.shape[1], a.shape[3]) for a in parts),
            dtypes=tuple(str(a.dtype) for a in parts),
            bits=leaf.bits,
            group_size=leaf.group_size,
        )
    if isinstance(leaf, ArraysCache):
        states = tuple(None if a is None else tuple(a.shape) for a in leaf.cache)
        return LeafSpec(
            "recurrent", states=states, dtypes=tuple(None if a is None else str(a.dtype) for a in leaf.cache)
        )
    k, v = leaf.keys.shape, leaf.values.shape
    dtypes = (str(leaf.keys.dtype), str(leaf.values.dtype))
    if isinstance(leaf, WindowedKVCache):
        return LeafSpec("window", (k[1], k[3]), (v[1], v[3]), leaf.window, dtypes=dtypes)
    return LeafSpec("plain", (k[1], k[3]), (v[1], v[3]), dtypes=dtypes)


def _vocab_size(model: Any) -> int:
    """Rows of the input embedding: an id at or past it is out of bounds for the model."""
    # Explicit `is not None`: an mlx Module is a dict, false when it holds nothing.
    for holder in (model, getattr(model, "model", None), getattr(model, "language_model", None)):
        inner = getattr(holder, "model", None) if holder is not None else None
        for where in (holder, inner):
            embed = getattr(where, "embed_tokens", None) if where is not None else None
            weight = getattr(embed, "weight", None) if embed is not None else None
            if weight is not None and weight.ndim == 2:
                return int(weight.shape[0])
    vocab = getattr(getattr(model, "args", None), "vocab_size", None)
    return vocab if isinstance(vocab, int) else 0


# --- writing -------------------------------------------------------------------

# safetensors' names for the dtypes a cache holds.
_SAFETENSORS_DTYPES = {mx.float32: "F32", mx.float16: "F16", mx.bfloat16: "BF16", mx.int32: "I32", mx.uint32: "U32"}


@dataclass
class Tensor:
    name: str
    dtype: mx.Dtype
    shape: tuple[int, ...]
    chunks: list[memoryview]  # memoryviews of evaluated arrays' bytes, in order: reading them calls no MLX

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks)


@dataclass
class Snapshot:
    """A cache ready to be written: taken on the engine thread, written from any thread.

    mx.save_safetensors evaluates its arrays, and MLX evaluation is not thread-safe, so the file
    is written here from the bytes of the cache's own buffers (each head's valid prefix), which
    reading calls no MLX for. The cache must not change until the file is written: an evicted
    cache is in no one else's hands."""

    meta: dict[str, Any]
    tensors: list[Tensor]
    cache: ConversationCache

    def write(self, path: Path) -> None:
        """Write the safetensors file at `path` (a new file), with its checksum."""
        meta = dict(self.meta, checksum=_digest(self.meta, self.tensors))
        header, offset = {}, 0
        for t in self.tensors:
            header[t.name] = {
                "dtype": _SAFETENSORS_DTYPES[t.dtype],
                "shape": list(t.shape),
                "data_offsets": [offset, offset + t.nbytes],
            }
            offset += t.nbytes
        header["__metadata__"] = meta
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned
        with open(path, "wb") as f:
            f.write(len(raw).to_bytes(8, "little"))
            f.write(raw)
            for t in self.tensors:
                for chunk in t.chunks:
                    f.write(chunk)


def snapshot(conv_id: str, cache: ConversationCache) -> Snapshot:
    """`cache` as a Snapshot; on the engine thread. Copies nothing but the ids and small state:
    an attention layer's tensors are views of its buffers."""
    ids = mx.array(cache.token_ids, dtype=mx.int32)
    leaves = cache.leaves()
    mx.eval([ids] + [a for leaf in leaves for a in kinds.arrays(leaf)])
    tensors = [Tensor("token_ids", ids.dtype, tuple(ids.shape), [_bytes(ids)])]
    for i, leaf in enumerate(leaves):
        tensors += _leaf_tensors(str(i), leaf)
    held = [i for i, leaf in enumerate(leaves) if kinds.held_back(leaf)]
    for k, point in enumerate(cache.checkpoints.items):
        for i, state in zip(held, point.states):
            tensors += _state_tensors(f"cp{k}.{i}", state)
    meta = {
        "format": FORMAT,
        "conversation": conv_id,
        "history": json.dumps(cache.history.to_json()),
        "layers": str(len(leaves)),
        "checkpoints": json.dumps(cache.checkpoints.positions()),
        "kv_quantization": _quant_label(leaves),
    }
    return Snapshot(meta, sorted(tensors, key=lambda t: t.name), cache)


def _quant_label(leaves: list[Any]) -> str:
    """How the plain attention layers are stored: "none", or bits/group size (a file of other settings is dropped)."""
    for leaf in leaves:
        if isinstance(leaf, QuantizedContiguousKVCache):
            return f"{leaf.bits}/{leaf.group_size}"
    return "none"


def _leaf_tensors(name: str, leaf: Any) -> list[Tensor]:
    if isinstance(leaf, ArraysCache):
        return _state_tensors(name, leaf.cache)
    if isinstance(leaf, QuantizedContiguousKVCache):
        parts = [("keys", j, a) for j, a in enumerate(leaf.keys)] + [
            ("values", j, a) for j, a in enumerate(leaf.values)
        ]
        return [_prefix(f"{name}.{side}{j}", a, leaf.held) for side, j, a in parts]
    return [_prefix(f"{name}.keys", leaf.keys, leaf.held), _prefix(f"{name}.values", leaf.values, leaf.held)]


def _state_tensors(name: str, state: Any) -> list[Tensor]:
    """A checkpoint's copy (kinds.save) or a recurrent leaf's state, as evaluated contiguous tensors."""
    if isinstance(state, tuple):  # a window: keys, values, offset
        named = [(f"{name}.keys", state[0]), (f"{name}.values", state[1])] if state[0].ndim == 4 else []
    else:
        named = [(f"{name}.state{j}", a) for j, a in enumerate(state) if a is not None]
    arrays = [mx.contiguous(a) for _, a in named]
    mx.eval(arrays)
    return [Tensor(n, a.dtype, tuple(a.shape), [_bytes(a)]) for (n, _), a in zip(named, arrays)]


def _bytes(array: mx.array) -> memoryview:
    return memoryview(array).cast("B")


def _prefix(name: str, buffer: mx.array, n: int) -> Tensor:
    """The first `n` positions of a (batch, heads, capacity, dim) buffer: a view per head."""
    batch, heads, capacity, dim = buffer.shape
    view = memoryview(buffer)
    if not view.c_contiguous:  # not a buffer of ours: copy the prefix
        prefix = mx.contiguous(buffer[..., :n, :])
        mx.eval(prefix)
        return Tensor(name, buffer.dtype, (batch, heads, n, dim), [_bytes(prefix)])
    flat, row = view.cast("B"), dim * buffer.dtype.size
    chunks = [flat[h * capacity * row : (h * capacity + n) * row] for h in range(batch * heads)]
    return Tensor(name, buffer.dtype, (batch, heads, n, dim), chunks)


def checksum(arrays: dict[str, Any], meta: dict[str, Any]) -> str:
    """sha256 of the metadata (but the checksum) and of each tensor's name, dtype, shape and CRC-32
    (CRC-32 of the bytes runs ~3x faster than sha256: a restore stays far cheaper than a prefill)."""
    contiguous = {name: mx.contiguous(array) for name, array in arrays.items()}
    mx.eval(list(contiguous.values()))
    tensors = [Tensor(name, a.dtype, tuple(a.shape), [_bytes(a)]) for name, a in sorted(contiguous.items())]
    return _digest(meta, tensors)


def _digest(meta: dict[str, Any], tensors: list[Tensor]) -> str:
    digest = hashlib.sha256(json.dumps({k: v for k, v in meta.items() if k != "checksum"}, sort_keys=True).encode())

    def crc(t: Tensor) -> int:
        value = 0
        for chunk in t.chunks:
            value = zlib.crc32(chunk, value)
        return value

    # zlib releases the GIL on large buffers: the tensors are summed on every core at once.
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="chinwag-crc") as pool:
        crcs = list(pool.map(crc, tensors))
    for t, value in zip(tensors, crcs):
        digest.update(f"\0{t.name}\0{t.dtype}\0{t.shape}\0{value}".encode())
    return digest.hexdigest()


# --- reading -------------------------------------------------------------------


def read(path: Path, layout: CacheLayout, conv_id: str) -> ConversationCache | None:
    """The cache saved at `path` once every check passes; None if there is no file there."""
    loaded = _load(path, layout, conv_id)
    if loaded is None:
        return None
    arrays, meta, n_tokens = loaded
    if not hmac.compare_digest(str(meta.get("checksum", "")), checksum(arrays, meta)):
        raise UnusableCache("its checksum does not match its contents")
    ids = arrays["token_ids"]
    if mx.min(ids).item() < 0 or mx.max(ids).item() >= layout.vocab_size:
        raise UnusableCache(f"it holds token ids outside the model's vocabulary of {layout.vocab_size}")
    token_ids = ids.tolist()
    history = _history(meta.get("history"), layout.vocab_size)
    if not _agrees(history, token_ids):
        raise UnusableCache("its history does not match the tokens it holds")
    return _restore(arrays, meta, layout, token_ids, history)


def _load(path: Path, layout: CacheLayout, conv_id: str) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """(the file's arrays, read; its metadata; the number of tokens it holds) once it is a regular file
    no bigger than the model's cache can be and its layout is the model's; None if there is no file."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symlink
        kind = "a symlink" if os.path.islink(path) else (e.strerror or str(e))
        raise UnusableCache(f"cannot open it: {kind}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # checked before a file object: a folder cannot be one
        os.close(fd)
        raise UnusableCache(f"it is {describe_kind(st.st_mode)}, not a file")
    with os.fdopen(fd, "rb") as f:
        if st.st_size > layout.max_file_bytes:
            raise UnusableCache(f"it is {st.st_size} bytes, more than a cache of this model can hold")
        try:
            arrays, meta = mx.load(f, format="safetensors", return_metadata=True)
        except (RuntimeError, ValueError, OSError) as e:
            raise UnusableCache(f"not a readable safetensors file ({_one_line(e)})") from None
        n_tokens = _check_layout(arrays, meta, layout, conv_id)  # from the header: nothing read yet
        try:
            mx.eval(list(arrays.values()))  # read now, while the file is open
        except (RuntimeError, ValueError, OSError) as e:
            raise UnusableCache(f"its tensors cannot be read ({_one_line(e)})") from None
    return arrays, meta, n_tokens


def _restore(
    arrays: dict[str, Any], meta: dict[str, Any], layout: CacheLayout, token_ids: list[int], history: History
) -> ConversationCache:
    """The checked file's arrays as the model's cache: its leaves, grouped as the model's layers,
    and its checkpoints."""
    n_tokens = len(token_ids)
    capacity = initial_capacity(n_tokens, layout.max_tokens)  # what a new cache of these tokens reserves
    leaves = [_leaf(arrays, str(i), spec, n_tokens, capacity) for i, spec in enumerate(layout.specs)]
    cache = ConversationCache(layers=_grouped(leaves, layout.groups), token_ids=token_ids, history=history)
    held = [i for i, spec in enumerate(layout.specs) if spec.held_back]
    for k, position in enumerate(_positions(meta, n_tokens)):
        states = tuple(_state(arrays, f"cp{k}.{i}", layout.specs[i], position) for i in held)
        cache.checkpoints.items.append(kinds.checkpoint(position, states))
    cache.eval()
    return cache


def _leaf(arrays: dict[str, Any], name: str, spec: LeafSpec, n: int, capacity: int) -> Any:
    if spec.kind == "quantized":
        keys = tuple(arrays[f"{name}.keys{j}"] for j in range(3))
        values = tuple(arrays[f"{name}.values{j}"] for j in range(3))
        return QuantizedContiguousKVCache.from_parts(keys, values, spec.bits, spec.group_size, capacity)
    if spec.kind == "plain":
        return ContiguousAttentionKVCache.from_state((arrays[f"{name}.keys"], arrays[f"{name}.values"]), capacity)
    if spec.kind == "window":
        leaf = WindowedKVCache(spec.window)
        leaf.restore_window((arrays[f"{name}.keys"], arrays[f"{name}.values"], n))
        return leaf
    leaf = ArraysCache(len(spec.states))
    leaf.cache = [None if shape is None else arrays[f"{name}.state{j}"] for j, shape in enumerate(spec.states)]
    return leaf


def _state(arrays: dict[str, Any], name: str, spec: LeafSpec, position: int) -> Any:
    """A checkpoint's copy of one leaf, as kinds.save() gives it."""
    if spec.kind == "window":
        return arrays[f"{name}.keys"], arrays[f"{name}.values"], position
    return [None if shape is None else arrays[f"{name}.state{j}"] for j, shape in enumerate(spec.states)]


def _grouped(leaves: list[Any], groups: list[int | None]) -> list[Any]:
    layers, at = [], 0
    for count in groups:
        if count is None:
            layers.append(leaves[at])
            at += 1
        else:
            layers.append(CacheList(*leaves[at : at + count]))
            at += count
    return layers


def _positions(meta: dict[str, Any], n: int) -> list[int]:
    """The checkpoints' positions: increasing, within the ids, at most MAX_CHECKPOINTS."""
    try:
        positions = json.loads(meta.get("checkpoints", "[]"))
    except ValueError:
        raise UnusableCache("its checkpoints are not well formed") from None
    if (
        not isinstance(positions, list)
        or len(positions) > MAX_CHECKPOINTS
        or not all(type(p) is int and 0 < p <= n for p in positions)
        or positions != sorted(set(positions))
    ):
        raise UnusableCache(f"its checkpoints are not up to {MAX_CHECKPOINTS} increasing positions within its ids")
    return positions


def _check_layout(arrays: dict[str, Any], meta: dict[str, Any], layout: CacheLayout, conv_id: str) -> int:
    """The number of tokens held, once the names, shapes and dtypes are those of the loaded model."""
    _check_meta(meta, layout.specs, conv_id)
    ids = arrays["token_ids"]
    if ids.dtype != mx.int32 or ids.ndim != 1 or not 0 < ids.shape[0] <= layout.max_tokens:
        raise UnusableCache(f"its token ids are not 1 to {layout.max_tokens} int32 values")
    n = int(ids.shape[0])
    specs = layout.specs
    if meta.get("layers") != str(len(specs)):
        raise UnusableCache(f"its layers are not the model's {len(specs)}")
    expected = _expected_tensors(specs, meta, n)
    if set(arrays) != set(expected):
        raise UnusableCache(f"its layers are not the model's {len(specs)}")
    for name, want in expected.items():
        if want is not None:
            _check_tensor(name, arrays[name], *want)
    return n


def _check_meta(meta: dict[str, Any], specs: list[LeafSpec], conv_id: str) -> None:
    """UnusableCache unless this version of Chinwag wrote the file, for this conversation, with this
    run's KV cache quantization."""
    if meta.get("format") != FORMAT:
        raise UnusableCache("it was written by another version of Chinwag")
    if meta.get("conversation") != conv_id:
        raise UnusableCache("it belongs to another conversation")
    quantized = [s for s in specs if s.kind == "quantized"]
    expected_quant = f"{quantized[0].bits}/{quantized[0].group_size}" if quantized else "none"
    if meta.get("kv_quantization") != expected_quant:
        raise UnusableCache(
            f"its KV cache quantization is {meta.get('kv_quantization')}, not this run's {expected_quant}"
        )


def _expected_tensors(specs: list[LeafSpec], meta: dict[str, Any], n: int) -> dict[str, Any]:
    """Every tensor the file must hold (its leaves', then each checkpoint's copies), by name."""
    expected: dict[str, Any] = {"token_ids": None}
    for i, spec in enumerate(specs):
        expected.update(_expected(str(i), spec, n, current=True))
    held = [i for i, spec in enumerate(specs) if spec.held_back]
    for k, position in enumerate(_positions(meta, n)):
        for i in held:
            expected.update(_expected(f"cp{k}.{i}", specs[i], position, current=False))
    return expected


def _check_tensor(name: str, array: mx.array, shape: tuple[int, ...], dtype: str, longest: int | None) -> None:
    got, where = tuple(array.shape), name.replace(".", " ", 1)
    if longest is not None:  # a window's held positions: any length from 1 to `longest`
        if len(got) != 4 or got[:2] + got[3:] != shape[:2] + shape[3:] or not 0 < got[2] <= longest:
            raise UnusableCache(f"{where} have shape {got}, not {shape[:2]} x up to {longest} x {shape[3:]}")
    elif got != shape:
        raise UnusableCache(f"{where} have shape {got}, not {shape}")
    if str(array.dtype) != dtype:
        raise UnusableCache(f"{where} are {array.dtype}, not the model's {dtype}")


def _expected(name: str, spec: LeafSpec, n: int, current: bool) -> dict[str, Any]:
    """Tensor name -> (shape, dtype, longest held or None) that a leaf (or its checkpoint copy) must have."""
    if spec.kind == "recurrent":
        return {f"{name}.state{j}": (shape, spec.dtypes[j], None) for j, shape in enumerate(spec.states) if shape}
    if spec.kind == "quantized":
        names = [f"{name}.{side}{j}" for side in ("keys", "values") for j in range(3)]
        shapes = [s for s in spec.states if s is not None]  # a quantized leaf leaves none empty
        return {k: ((1, h, n, d), dt, None) for k, (h, d), dt in zip(names, shapes, spec.dtypes)}
    (kh, kd), (vh, vd) = spec.keys, spec.values
    if spec.kind == "plain":
        return {
            f"{name}.keys": ((1, kh, n, kd), spec.dtypes[0], None),
            f"{name}.values": ((1, vh, n, vd), spec.dtypes[1], None),
        }
    longest = min(n, spec.window + WINDOW_SLACK) if current else min(n, spec.window - 1)
    if longest == 0:
        return {}
    return {
        f"{name}.keys": ((1, kh, longest, kd), spec.dtypes[0], longest),
        f"{name}.values": ((1, vh, longest, vd), spec.dtypes[1], longest),
    }


def _history(text: Any, vocab_size: int) -> History:  # the file says what it holds: anything
    """The History in the metadata, every field checked (it decides the ids fed to the model)."""
    try:
        data = json.loads(text)
        spans = data["spans"]
        start = data["start"]
        if not isinstance(spans, list) or type(start) is not int or not 0 <= start <= len(spans):
            raise ValueError("bad start or spans")
        history = History(spans=[None if s is None else _span(s, vocab_size) for s in spans], start=start)
    except (TypeError, ValueError, KeyError, IndexError, RecursionError) as e:
        raise UnusableCache(f"its history is not well formed ({_one_line(e)})") from None
    return history


def _span(s: object, vocab_size: int) -> Span:
    if not isinstance(s, list) or len(s) != 5:
        raise ValueError("a span is not a list of 5")
    role, content, prefix, ids, reply = s
    if role not in ROLES or not isinstance(content, str) or not isinstance(prefix, str):
        raise ValueError("a span's role or text")
    for part in (ids, reply if reply is not None else []):
        if not isinstance(part, list) or not all(type(t) is int and 0 <= t < vocab_size for t in part):
            raise ValueError("a span's ids are not ids of this vocabulary")
    return Span(role, content, prefix, tuple(ids), None if reply is None else tuple(reply))


def _agrees(history: History, token_ids: list[int]) -> bool:
    """The window's remembered pieces (system messages before `start`, then the rest, up to the
    first one not remembered) and the cached ids agree as far as both go."""
    remembered: list[int] = []
    for i, span in enumerate(history.spans):
        if i < history.start and (span is None or span.role != "system"):
            continue
        if span is None:
            break
        remembered.extend(span.ids)
        if len(remembered) >= len(token_ids):
            break
    n = min(len(remembered), len(token_ids))
    return remembered[:n] == token_ids[:n]


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]
