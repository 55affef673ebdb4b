"""GGML quantized blocks read with numpy, for the GGUFs MLX's own loader cannot read.

mx.load reads Q4_0, Q4_1 and Q8_0 as MLX quantized triples and a few K-quants as float16,
but refuses a whole file for one tensor of another type (Gemma 3's Q4_K_M mixes in Q5_0).
Here every block layout is decoded from ggml-common.h / ggml-quants.c:

- types whose blocks are 32 values of one scale and offset (Q4_0, Q4_1, Q5_0, Q8_0, and Q4_K,
  whose 256-value super-blocks hold eight such groups) become MLX's affine quantization with
  group size 32 exactly: codes, scale and bias per group with value = scale * code + bias,
  the same numbers ggml's dequantization computes;
- Q6_K (groups of 16, which MLX cannot hold) and the float types are decoded to floats (the
  importer requantizes Q6_K).

`pack` lays codes out as MLX does: a little-endian bit stream in uint32 words. No MLX here.
"""

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

# Types this module decodes (the importer's numpy reader), and which of them are affine groups of 32.
AFFINE_BITS = {"Q4_0": 4, "Q4_1": 4, "Q5_0": 5, "Q8_0": 8, "Q4_K": 4}
DENSE_TYPES = ("F32", "F16", "BF16", "Q2_K", "Q6_K")
NUMPY_TYPES = frozenset(AFFINE_BITS) | frozenset(DENSE_TYPES)
GROUP = 32

# Elements and bytes per block (as header.GGML_TYPES has them).
_BLOCKS = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q8_0": (32, 34),
    "Q2_K": (256, 84),
    "Q4_K": (256, 144),
    "Q6_K": (256, 210),
}


def tensor_nbytes(type_name: str, n: int) -> int:
    block, nbytes = _BLOCKS[type_name]
    return n // block * nbytes


def _f16(raw: np.ndarray) -> np.ndarray:
    """A (blocks, 2) byte column as float32 (ggml's fp16 fields)."""
    return np.ascontiguousarray(raw).view("<f2").reshape(-1).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(blocks, 16) bytes -> (blocks, 32) codes: the low nibbles are values 0-15, the high 16-31."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def affine(type_name: str, raw: np.ndarray, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(codes uint8 (rows, cols), scales float32 (rows, cols/32), biases float32) of a tensor's blocks.

    raw: the tensor's bytes (uint8) for rows of `cols` values; value = scale * code + bias.
    """
    block, nbytes = _BLOCKS[type_name]
    b = raw.reshape(-1, nbytes)
    if type_name == "Q8_0":
        d = _f16(b[:, 0:2])
        codes = b[:, 2:] ^ np.uint8(0x80)  # int8 q + 128
        scales, biases = d, -128.0 * d
    elif type_name == "Q4_0":
        d = _f16(b[:, 0:2])
        codes = _nibbles(b[:, 2:])
        scales, biases = d, -8.0 * d
    elif type_name == "Q4_1":
        codes = _nibbles(b[:, 4:])
        scales, biases = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    elif type_name == "Q5_0":
        d = _f16(b[:, 0:2])
        qh = np.ascontiguousarray(b[:, 2:6]).view("<u4")  # bit j: the high bit of value j
        high = ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.uint8)
        codes = _nibbles(b[:, 6:]) | (high << 4)  # q - 16 is the signed value
        scales, biases = d, -16.0 * d
    elif type_name == "Q4_K":
        codes, scales, biases = _q4_k(b)
    else:
        raise ValueError(f"{type_name} is not an affine type")
    groups = cols // GROUP
    return (
        np.ascontiguousarray(codes).reshape(-1, cols),
        np.ascontiguousarray(scales, dtype=np.float32).reshape(-1, groups),
        np.ascontiguousarray(biases, dtype=np.float32).reshape(-1, groups),
    )


def _q4_k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins packed in a Q4_K block's 12 bytes (get_scale_min_k4)."""
    sc = np.empty((s.shape[0], 8), np.uint8)
    m = np.empty((s.shape[0], 8), np.uint8)
    sc[:, :4] = s[:, 0:4] & 63
    m[:, :4] = s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, m


def _q4_k(b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    sc, m = _q4_k_scales(b[:, 4:16])
    qs = b[:, 16:].reshape(-1, 4, 32)  # 32 bytes per pair of groups: low nibbles, then high
    codes = np.stack([qs & 0x0F, qs >> 4], axis=2).reshape(-1, 256)
    # ggml: y = (d * sc) * q - (dmin * m); both products are exact in float32.
    return codes, d[:, None] * sc, -(dmin[:, None] * m)


def dense(type_name: str, raw: np.ndarray) -> np.ndarray:
    """The values of a float or Q6_K tensor, flat (float16 for F16, else float32)."""
    if type_name == "F32":
        return raw.view("<f4").astype(np.float32, copy=False)
    if type_name == "F16":
        return raw.view("<f2").astype(np.float16, copy=False)
    if type_name == "BF16":
        return (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
    if type_name == "Q6_K":
        return _q6_k(raw.reshape(-1, 210))
    if type_name == "Q2_K":
        return _q2_k(raw.reshape(-1, 84))
    if type_name in AFFINE_BITS:
        codes, scales, biases = affine(type_name, raw, GROUP)
        out: np.ndarray = (codes.astype(np.float32) * scales + biases).reshape(-1)
    return out
    raise ValueError(f"cannot decode GGML type {type_name}")


def _q6_k(b: np.ndarray) -> np.ndarray:
    ql = b[:, 0:128].reshape(-1, 2, 64)
    qh = b[:, 128:192].reshape(-1, 2, 32)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)  # one per 16 values
    d = _f16(b[:, 208:210])
    lo, hi = ql[:, :, :32], ql[:, :, 32:]
    q = np.stack(
        [
            (lo & 0x0F) | ((qh & 3) << 4),
            (hi & 0x0F) | (((qh >> 2) & 3) << 4),
            (lo >> 4) | (((qh >> 4) & 3) << 4),
            (hi >> 4) | (((qh >> 6) & 3) << 4),
        ],
        axis=2,
    ).reshape(-1, 16, 16)
    # ggml: y = d * sc * (q - 32), evaluated left to right in float32.
    return ((d[:, None] * sc)[:, :, None] * (q.astype(np.float32) - 32.0)).reshape(-1)


def _q2_k(b: np.ndarray) -> np.ndarray:
    sc = b[:, 0:16]  # per 16 values: the scale in the low nibble, the min in the high one
    qs = b[:, 16:80].reshape(-1, 2, 1, 2, 16)  # two halves of 128 values; 16 bytes per group of 16
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    shifts = np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1, 1)
    q = ((qs >> shifts) & 3).reshape(-1, 16, 16).astype(np.float32)  # half, shift, 32 bytes
    # ggml: y = (d * (sc & 15)) * q - (dmin * (sc >> 4)).
    scale = d[:, None] * (sc & 0x0F).astype(np.float32)
    low = dmin[:, None] * (sc >> 4).astype(np.float32)
    out: np.ndarray = (scale[:, :, None] * q - low[:, :, None]).reshape(-1)
    return out


def pack(codes: np.ndarray, bits: int, chunk_rows: int = 4096) -> np.ndarray:
    """Codes (rows, cols) of `bits` bits each as MLX packs them: (rows, cols * bits / 32) uint32."""
    rows, cols = codes.shape
    if cols * bits % 32:
        raise ValueError(f"{cols} codes of {bits} bits do not fill whole 32-bit words")
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8).view("<u4")
    per = 8 // math.gcd(8, bits)  # codes per whole number of bytes: 2 for 4 bits, 8 for 5, 4 for 6
    nbytes = per * bits // 8
    shifts = (np.arange(per, dtype=np.uint64) * np.uint64(bits))[None, :]
    out = np.empty((rows, cols * bits // 8), np.uint8)
    for start in range(0, rows, chunk_rows):  # bounded: 8 bytes per code of one chunk at a time
        c = codes[start : start + chunk_rows].reshape(-1, per).astype(np.uint64)
        words = np.bitwise_or.reduce(c << shifts, axis=1).astype("<u8")
        out[start : start + chunk_rows] = words.view(np.uint8).reshape(-1, 8)[:, :nbytes].reshape(-1, out.shape[1])
    return out.view("<u4")


def read_affine(
    data: "GGUFBytes", offset: int, type_name: str, rows: int, cols: int, chunk_values: int = 1 << 22
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(packed uint32, scales, biases) of an affine tensor, decoded a few million values at a time."""
    bits = AFFINE_BITS[type_name]
    row_bytes = tensor_nbytes(type_name, cols)
    packed = np.empty((rows, cols * bits // 32), np.uint32)
    scales = np.empty((rows, cols // GROUP), np.float32)
    biases = np.empty_like(scales)
    step = max(1, chunk_values // cols)
    for r in range(0, rows, step):
        n = min(step, rows - r)
        codes, scales[r : r + n], biases[r : r + n] = affine(
            type_name, data.read(offset + r * row_bytes, n * row_bytes), cols
        )
        packed[r : r + n] = pack(codes, bits)
    return packed, scales, biases


class GGUFBytes:
    """A GGUF's bytes, from one file or from consecutive pieces of one (a package's chunks)."""

    def __init__(self, parts: Sequence[Path]) -> None:
        self.parts = [Path(p) for p in parts]
        self.sizes = [p.stat().st_size for p in self.parts]
        self.starts = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.size = sum(self.sizes)

    def read(self, offset: int, n: int) -> np.ndarray:
        """n bytes from offset, as a fresh uint8 array (only those bytes are read)."""
        if offset < 0 or offset + n > self.size:
            raise ValueError(f"bytes {offset}-{offset + n} are past the end of the file ({self.size} bytes)")
        out = np.empty(n, np.uint8)
        view = out.data
        done = 0
        for path, start, size in zip(self.parts, self.starts, self.sizes):
            end = start + size
            if done == n:
                break
            if end <= offset + done:
                continue
            take = min(n - done, end - (offset + done))
            with open(path, "rb") as f:
                f.seek(offset + done - start)
                if f.readinto(view[done : done + take]) != take:
                    raise ValueError(f"{path.name} is shorter than it was")
            done += take
        return out
