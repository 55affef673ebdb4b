"""Pure-Python GGUF header reader: metadata, tensor table, and a size check per tensor.

No MLX here (nor in anything this imports): the registry describes GGUFs with it while
listing models, and a truncated file must be refused before MLX memory-maps it.
"""

import mmap
import os
import stat
import struct
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.atomic import describe_kind
from engine.errors import ChinwagError, ModelError

# GGUF tensor types: name, elements per block, bytes per block.
GGML_TYPES = {
    0: ("F32", 1, 4),
    1: ("F16", 1, 2),
    2: ("Q4_0", 32, 18),
    3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24),
    8: ("Q8_0", 32, 34),
    9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84),
    11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176),
    14: ("Q6_K", 256, 210),
    15: ("Q8_K", 256, 292),
    24: ("I8", 1, 1),
    25: ("I16", 1, 2),
    26: ("I32", 1, 4),
    27: ("I64", 1, 8),
    28: ("F64", 1, 8),
    30: ("BF16", 1, 2),
}

# Metadata value types: struct format (None = special).
_VALUE_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

# Bounds that no real GGUF comes near, so a hostile header costs little memory and time.
MAX_STRING_BYTES = 1 << 20  # chat templates are ~10 KB, tokens a few bytes
MAX_KEPT_ARRAY = 1_000_000  # the largest vocabularies are ~260k tokens
MAX_ALIGNMENT = 1 << 16
MAX_ENTRIES = 1 << 16  # tensors or metadata keys: real models have a few thousand at most
# Arrays the importer needs (the tokenizer's); every other array is skipped, whatever its size.
KEPT_ARRAY_PREFIX = "tokenizer."


@dataclass
class GGUFTensor:
    name: str
    shape: tuple[int, ...]  # GGUF order: fastest-varying dimension first
    type_id: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type_id, (f"type {self.type_id}",))[0]


@dataclass
class GGUFHeader:
    path: Path  # the file (or its first piece)
    version: int
    metadata: dict[str, Any]
    tensors: list[GGUFTensor] = field(default_factory=list)
    data_offset: int = 0
    # A GGUF stored as consecutive pieces (a package's chunks): all of them, path first; () for one file.
    parts: tuple[Path, ...] = ()

    @property
    def files(self) -> tuple[Path, ...]:
        """The files whose concatenation is the GGUF."""
        return self.parts or (self.path,)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def context_length(self) -> int:
        value = self.arch_value("context_length", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0

    @property
    def name(self) -> str:
        return printable(self.metadata.get("general.name")) or printable(self.path.stem) or "model"

    def type_counts(self) -> dict[str, int]:
        """Parameter count per tensor type name, for the quantization label."""
        counts: dict[str, int] = {}
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            counts[t.type_name] = counts.get(t.type_name, 0) + n
        return counts


def printable(value: object, limit: int = 200) -> str:
    """One line without control or format characters: a GGUF's text may reach a terminal."""
    if not isinstance(value, str):
        return ""
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in value)
    return " ".join(text.split())[:limit]


class _Reader:
    def __init__(self, buf: bytes | memoryview | mmap.mmap) -> None:
        self.buf, self.pos = buf, 0

    def unpack(self, fmt: str) -> Any:
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.unpack("<Q")
        if self.pos + n > len(self.buf):
            raise ValueError("string runs past the end of the file")
        if n > MAX_STRING_BYTES:
            raise ValueError(f"a metadata string of {n} bytes (at most {MAX_STRING_BYTES})")
        s = bytes(self.buf[self.pos : self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype: int, keep_arrays: bool) -> Any:
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            item_type, n = self.unpack("<I"), self.unpack("<Q")
            if keep_arrays and n > MAX_KEPT_ARRAY:
                raise ValueError(f"a metadata array of {n} items (at most {MAX_KEPT_ARRAY})")
            if item_type == _STRING:
                if not keep_arrays:
                    if n * 8 > len(self.buf) - self.pos:
                        raise ValueError("array runs past the end of the file")
                    for _ in range(n):
                        self.pos += 8 + struct.unpack_from("<Q", self.buf, self.pos)[0]
                        if self.pos > len(self.buf):
                            raise ValueError("array runs past the end of the file")
                    return _Skipped(n)
                return [self.string() for _ in range(n)]
            fmt = _VALUE_FORMATS.get(item_type)
            if fmt is None:
                raise ValueError(f"unsupported metadata array type {item_type}")
            size = struct.calcsize(fmt)
            if self.pos + n * size > len(self.buf):
                raise ValueError("array runs past the end of the file")
            if not keep_arrays:
                self.pos += n * size
                return _Skipped(n)
            values = list(struct.unpack_from(f"<{n}{fmt[1]}", self.buf, self.pos))
            self.pos += n * size
            return values
        fmt = _VALUE_FORMATS.get(vtype)
        if fmt is None:
            raise ValueError(f"unknown metadata value type {vtype}")
        return self.unpack(fmt)


@dataclass(frozen=True)
class _Skipped:
    """An array the caller did not ask for (only its length is kept)."""

    length: int


def read_gguf_header(path: str | Path | Sequence[Path], keep_arrays: bool = False) -> GGUFHeader:
    """Parse a GGUF file's metadata and tensor table; ModelError if it is not a whole GGUF.

    path: a file, or the consecutive pieces of one (a list or tuple, the header in the first).
    """
    parts, first = _pieces(path)
    try:
        size = _total_size(parts or (first,), bool(parts))
        with open(first, "rb") as f:
            if size < 24 or os.fstat(f.fileno()).st_size < 24:
                raise ValueError("file is too small")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                header = _parse_header(first, buf, size, keep_arrays)
        header.parts = parts
        return header
    except ChinwagError:
        raise
    except FileNotFoundError as e:
        raise ModelError(f"GGUF file not found: {e.filename or first}") from e
    except IsADirectoryError as e:
        raise ModelError(f"not a GGUF file (it is a folder): {e.filename or first}") from e
    except (ValueError, struct.error, OverflowError, MemoryError, OSError) as e:
        raise ModelError(f"corrupt or truncated GGUF file ({e}): {first}") from e


def _pieces(path: str | Path | Sequence[Path]) -> tuple[tuple[Path, ...], Path]:
    """(the pieces, () for one file; the file that holds the header)."""
    if isinstance(path, (str, Path)):
        return (), Path(path)
    parts = tuple(Path(p) for p in path)
    if not parts:
        raise ModelError("no GGUF file given")
    return parts, parts[0]


def _total_size(files: tuple[Path, ...], pieces: bool) -> int:
    """The bytes of the files together; ModelError for one that is not a regular file (a named pipe
    would wait forever for a writer), IsADirectoryError for a folder among pieces."""
    size = 0
    for p in files:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
            raise ModelError(f"not a GGUF file (it is {describe_kind(st.st_mode)}): {p}")
        if pieces and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(p)
        size += st.st_size
    return size


def _parse_header(path: Path, buf: bytes | memoryview | mmap.mmap, size: int, keep_arrays: bool) -> GGUFHeader:
    r = _Reader(buf)
    version, n_tensors, n_kv = _preamble(r, size)
    metadata = {}
    for _ in range(n_kv):
        key = r.string()
        metadata[key] = r.value(r.unpack("<I"), keep_arrays and key.startswith(KEPT_ARRAY_PREFIX))
    tensors = [_tensor_entry(r) for _ in range(n_tensors)]
    data_offset = _data_offset(r.pos, metadata)
    _check_extents(tensors, data_offset, size)
    return GGUFHeader(path, version, metadata, tensors, data_offset)


def _preamble(r: _Reader, size: int) -> tuple[int, int, int]:
    """(version, tensor count, metadata count), once the magic bytes, the version and the counts are
    ones a GGUF of `size` bytes can have."""
    if bytes(r.buf[:4]) != b"GGUF":
        raise ValueError("no GGUF magic bytes")
    r.pos = 4
    version = r.unpack("<I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old")
    n_tensors, n_kv = r.unpack("<Q"), r.unpack("<Q")
    # A tensor entry takes at least 24 bytes and a metadata entry 12: counts the file cannot hold are lies.
    if n_tensors > MAX_ENTRIES or n_kv > MAX_ENTRIES or n_tensors * 24 + n_kv * 12 > size:
        raise ValueError("implausible header counts")
    return version, n_tensors, n_kv


def _tensor_entry(r: _Reader) -> GGUFTensor:
    name = r.string()
    n_dims = r.unpack("<I")
    if n_dims > 8:
        raise ValueError(f"tensor {name} has {n_dims} dimensions")
    shape = tuple(r.unpack("<Q") for _ in range(n_dims))
    return GGUFTensor(name, shape, r.unpack("<I"), r.unpack("<Q"))


def _data_offset(end_of_header: int, metadata: dict[str, Any]) -> int:
    """Where the tensor data starts: after the header, at the file's alignment (a power of two)."""
    align = metadata.get("general.alignment", 32)
    if isinstance(align, bool) or not isinstance(align, int) or not 0 < align <= MAX_ALIGNMENT or align & (align - 1):
        raise ValueError(f"general.alignment {printable(repr(align), 40)} is not a power of two")
    return (end_of_header + align - 1) // align * align


def _check_extents(tensors: list[GGUFTensor], data_offset: int, size: int) -> None:
    """ValueError for a tensor of a known type whose data would run past the end of the file."""
    for t in tensors:
        info = GGML_TYPES.get(t.type_id)
        if info is None:
            continue  # unknown size; the type check refuses it later with a clear message
        n = 1
        for d in t.shape:
            n *= d
        end = data_offset + t.offset + (n // info[1]) * info[2]
        if end > size:
            raise ValueError(f"tensor {t.name} runs past the end of the file ({size} bytes)")
