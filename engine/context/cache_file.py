"""A conversation's saved KV cache file: written with a checksum, read back as untrusted input.

A file in kv/ may be cut off or damaged, edited, replaced by a symlink or a named pipe, or
written for other weights. It is used only if every check passes: a regular file, opened
without following a link or blocking; no larger than a cache of the loaded model can be; its
format, layer count, shapes and dtype those of the loaded model; its checksum (sha256 of the
metadata and a CRC-32 of every tensor's bytes) matching; its ids in the vocabulary; its History well formed
and agreeing with its ids. Otherwise `UnusableCache` says why in one line and the caller
re-reads the history. The capacity reserved is derived from the tokens held, never read.
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

from engine.atomic import describe_kind
from engine.context.conversation import ConversationCache, initial_capacity, layer_shapes, supports_contiguous_cache
from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.context.prompt import ROLES, History, Span

FORMAT = "chinwag-kv-2"
# Room for the History's JSON (every message's text) besides the tensors.
MAX_METADATA_BYTES = 64 << 20
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class UnusableCache(Exception):
    """A saved cache that must not be used; the message says why, in one line."""


@dataclass
class CacheLayout:
    """What a saved cache must hold to be used with the loaded model."""

    shapes: list  # (kv heads, head dim) of each layer
    vocab_size: int
    max_tokens: int  # the context length
    probe: Callable[[], mx.Dtype]  # the dtype the model writes into its cache
    _dtype: mx.Dtype | None = None

    @property
    def dtype(self) -> mx.Dtype:
        if self._dtype is None:
            try:
                self._dtype = self.probe()
            except Exception as e:  # noqa: BLE001 - an architecture the probe cannot drive: its caches are not used
                raise UnusableCache(f"the dtype of this model's cache is unknown ({_one_line(e)})") from None
        return self._dtype

    @property
    def max_file_bytes(self) -> int:
        per_token = sum(2 * heads * dim for heads, dim in self.shapes) * 4 + 4  # float32 at most, and the id
        return per_token * self.max_tokens + MAX_METADATA_BYTES


def layout_of(model: Any, context_length: int) -> CacheLayout | None:
    """The layout a saved cache of `model` has; None for models whose caches are not saved."""
    try:
        if not supports_contiguous_cache(model):
            return None
        shapes = layer_shapes(model)
    except (ValueError, AttributeError, TypeError):
        return None
    vocab = _vocab_size(model)
    if not vocab or context_length < 1:
        return None

    def probe() -> mx.Dtype:
        # A one-token forward builds a lazy graph (nothing is computed): the dtype the cache takes.
        conv = ConversationCache.create(model, 1)
        model(mx.array([[0]], dtype=mx.int32), cache=conv.layers)
        return conv.layers[0].dtype

    return CacheLayout(shapes, vocab, context_length, probe)


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
_SAFETENSORS_DTYPES = {mx.float32: "F32", mx.float16: "F16", mx.bfloat16: "BF16", mx.int32: "I32"}


@dataclass
class Tensor:
    name: str
    dtype: mx.Dtype
    shape: tuple
    chunks: list  # memoryviews of evaluated arrays' bytes, in order: reading them calls no MLX

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

    meta: dict
    tensors: list
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
    """`cache` (every layer a ContiguousAttentionKVCache) as a Snapshot; on the engine thread.
    Copies nothing but the ids: the tensors are views of the cache's buffers."""
    ids = mx.array(cache.token_ids, dtype=mx.int32)
    mx.eval([ids] + [a for layer in cache.layers for a in (layer.keys, layer.values)])
    tensors = [Tensor("token_ids", ids.dtype, tuple(ids.shape), [_bytes(ids)])]
    for i, layer in enumerate(cache.layers):
        tensors += [_prefix(f"{i}.keys", layer.keys, layer.offset), _prefix(f"{i}.values", layer.values, layer.offset)]
    meta = {
        "format": FORMAT,
        "conversation": conv_id,
        "history": json.dumps(cache.history.to_json()),
        "layers": str(len(cache.layers)),
    }
    return Snapshot(meta, sorted(tensors, key=lambda t: t.name), cache)


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


def checksum(arrays: dict, meta: dict) -> str:
    """sha256 of the metadata (but the checksum) and of each tensor's name, dtype, shape and CRC-32
    (CRC-32 of the bytes runs ~3x faster than sha256: a restore stays far cheaper than a prefill)."""
    contiguous = {name: mx.contiguous(array) for name, array in arrays.items()}
    mx.eval(list(contiguous.values()))
    tensors = [Tensor(name, a.dtype, tuple(a.shape), [_bytes(a)]) for name, a in sorted(contiguous.items())]
    return _digest(meta, tensors)


def _digest(meta: dict, tensors: list) -> str:
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
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as e:  # ELOOP: a symlink
        kind = "a symlink" if os.path.islink(path) else (e.strerror or str(e))
        raise UnusableCache(f"cannot open it: {kind}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UnusableCache(f"it is {describe_kind(st.st_mode)}, not a file")
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
    if not hmac.compare_digest(str(meta.get("checksum", "")), checksum(arrays, meta)):
        raise UnusableCache("its checksum does not match its contents")
    ids = arrays["token_ids"]
    if mx.min(ids).item() < 0 or mx.max(ids).item() >= layout.vocab_size:
        raise UnusableCache(f"it holds token ids outside the model's vocabulary of {layout.vocab_size}")
    token_ids = ids.tolist()
    history = _history(meta.get("history"), layout.vocab_size)
    if not _agrees(history, token_ids):
        raise UnusableCache("its history does not match the tokens it holds")
    capacity = initial_capacity(n_tokens, layout.max_tokens)  # what a new cache of these tokens reserves
    layers = [
        ContiguousAttentionKVCache.from_state((arrays[f"{i}.keys"], arrays[f"{i}.values"]), capacity)
        for i in range(len(layout.shapes))
    ]
    cache = ConversationCache(layers=layers, token_ids=token_ids, history=history)
    cache.eval()
    return cache


def _check_layout(arrays: dict, meta: dict, layout: CacheLayout, conv_id: str) -> int:
    """The number of tokens held, once the names, shapes and dtypes are those of the loaded model."""
    if meta.get("format") != FORMAT:
        raise UnusableCache("it was written by another version of Chinwag")
    if meta.get("conversation") != conv_id:
        raise UnusableCache("it belongs to another conversation")
    n_layers = len(layout.shapes)
    names = {"token_ids"} | {f"{i}.{part}" for i in range(n_layers) for part in ("keys", "values")}
    if meta.get("layers") != str(n_layers) or set(arrays) != names:
        raise UnusableCache(f"its layers are not the model's {n_layers}")
    ids = arrays["token_ids"]
    if ids.dtype != mx.int32 or ids.ndim != 1 or not 0 < ids.shape[0] <= layout.max_tokens:
        raise UnusableCache(f"its token ids are not 1 to {layout.max_tokens} int32 values")
    n = ids.shape[0]
    for i, (heads, dim) in enumerate(layout.shapes):
        for part in ("keys", "values"):
            array = arrays[f"{i}.{part}"]
            if tuple(array.shape) != (1, heads, n, dim):
                raise UnusableCache(f"layer {i} {part} have shape {tuple(array.shape)}, not {(1, heads, n, dim)}")
            if array.dtype != layout.dtype:
                raise UnusableCache(f"layer {i} {part} are {array.dtype}, not the model's {layout.dtype}")
    return n


def _history(text: str, vocab_size: int) -> History:
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


def _span(s: dict, vocab_size: int) -> Span:
    if not isinstance(s, list) or len(s) != 5:
        raise ValueError("a span is not a list of 5")
    role, content, prefix, ids, reply = s
    if role not in ROLES or not isinstance(content, str) or not isinstance(prefix, str):
        raise ValueError("a span's role or text")
    for part in (ids, reply if reply is not None else []):
        if not isinstance(part, list) or not all(type(t) is int and 0 <= t < vocab_size for t in part):
            raise ValueError("a span's ids are not ids of this vocabulary")
    return Span(role, content, prefix, tuple(ids), None if reply is None else tuple(reply))


def _agrees(history: History, token_ids: list) -> bool:
    """The window's remembered pieces (system messages before `start`, then the rest, up to the
    first one not remembered) and the cached ids agree as far as both go."""
    remembered: list = []
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
