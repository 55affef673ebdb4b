"""GGML blocks decoded with numpy: each type against a plain loop written from ggml-quants.c,
Q5_0 against a block worked out by hand, MLX's packing, and GGUFs in pieces."""

import struct

import numpy as np
import pytest

from engine.models.gguf import blocks


def f16(x: float) -> bytes:
    return struct.pack("<e", x)


def test_q5_0_block_worked_by_hand():
    # d = 0.5; value j = d * (code_j - 16), code_j = low nibble (high for j >= 16) + 16 * bit j of qh.
    qs = bytes([0x10 * (15 - j) + j for j in range(16)])  # low nibbles 0..15, high nibbles 15..0
    qh = (1 << 0) | (1 << 3) | (1 << 16) | (1 << 31)  # values 0, 3, 16 and 31 get their high bit
    raw = np.frombuffer(f16(0.5) + struct.pack("<I", qh) + qs, np.uint8)
    want = [
        # j:  0     1     2     3     4     5     6     7     8     9    10    11    12    13    14    15
        0.0,
        -7.5,
        -7.0,
        1.5,
        -6.0,
        -5.5,
        -5.0,
        -4.5,
        -4.0,
        -3.5,
        -3.0,
        -2.5,
        -2.0,
        -1.5,
        -1.0,
        -0.5,
        # j: 16 (code 15 + 16)   17 ... 30 (codes 14 ... 1)              31 (code 0 + 16)
        7.5,
        -1.0,
        -1.5,
        -2.0,
        -2.5,
        -3.0,
        -3.5,
        -4.0,
        -4.5,
        -5.0,
        -5.5,
        -6.0,
        -6.5,
        -7.0,
        -7.5,
        0.0,
    ]
    assert blocks.dense("Q5_0", raw).tolist() == want
    codes, scales, biases = blocks.affine("Q5_0", raw, 32)
    assert codes[0, :4].tolist() == [16, 1, 2, 19] and codes[0, 16] == 31 and codes[0, 31] == 16
    assert scales.tolist() == [[0.5]] and biases.tolist() == [[-8.0]]  # -16 * d: exact, not requantized


# --- plain loops, as ggml-quants.c writes them (dequantize_row_*) --------------------------


def _half(b: bytes, at: int) -> float:
    return struct.unpack_from("<e", b, at)[0]


def _ref_q8_0(b: bytes) -> list:
    d = np.float32(_half(b, 0))
    return [d * np.float32(struct.unpack_from("<b", b, 2 + j)[0]) for j in range(32)]


def _ref_q4_0(b: bytes) -> list:
    d, qs = np.float32(_half(b, 0)), b[2:18]
    return [d * np.float32((qs[j] & 0x0F) - 8) for j in range(16)] + [
        d * np.float32((qs[j] >> 4) - 8) for j in range(16)
    ]


def _ref_q4_1(b: bytes) -> list:
    d, m, qs = np.float32(_half(b, 0)), np.float32(_half(b, 2)), b[4:20]
    return [d * np.float32(qs[j] & 0x0F) + m for j in range(16)] + [d * np.float32(qs[j] >> 4) + m for j in range(16)]


def _ref_q5_0(b: bytes) -> list:
    d, (qh,), qs = np.float32(_half(b, 0)), struct.unpack_from("<I", b, 2), b[6:22]
    lo = [((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16 for j in range(16)]
    hi = [((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16 for j in range(16)]
    return [d * np.float32(x) for x in lo + hi]


def _scale_min_k4(j: int, q: bytes) -> tuple:
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4)


def _ref_q4_k(b: bytes) -> list:
    d, dmin, scales, q = np.float32(_half(b, 0)), np.float32(_half(b, 2)), b[4:16], b[16:144]
    y, qi, is_ = [], 0, 0
    for _ in range(0, 256, 64):
        sc, m = _scale_min_k4(is_, scales)
        d1, m1 = d * np.float32(sc), dmin * np.float32(m)
        sc, m = _scale_min_k4(is_ + 1, scales)
        d2, m2 = d * np.float32(sc), dmin * np.float32(m)
        y += [d1 * np.float32(q[qi + ll] & 0xF) - m1 for ll in range(32)]
        y += [d2 * np.float32(q[qi + ll] >> 4) - m2 for ll in range(32)]
        qi, is_ = qi + 32, is_ + 2
    return y


def _ref_q6_k(b: bytes) -> list:
    ql, qh, sc, d = b[0:128], b[128:192], struct.unpack_from("<16b", b, 192), np.float32(_half(b, 208))
    y = [np.float32(0)] * 256
    for n in range(2):
        for ll in range(32):
            is_ = ll // 16
            L, H, S, Y = 64 * n, 32 * n, 8 * n, 128 * n
            q1 = ((ql[L + ll] & 0xF) | (((qh[H + ll] >> 0) & 3) << 4)) - 32
            q2 = ((ql[L + ll + 32] & 0xF) | (((qh[H + ll] >> 2) & 3) << 4)) - 32
            q3 = ((ql[L + ll] >> 4) | (((qh[H + ll] >> 4) & 3) << 4)) - 32
            q4 = ((ql[L + ll + 32] >> 4) | (((qh[H + ll] >> 6) & 3) << 4)) - 32
            for k, qv in enumerate((q1, q2, q3, q4)):
                y[Y + ll + 32 * k] = d * np.float32(sc[S + is_ + 2 * k]) * np.float32(qv)
    return y


def _ref_q2_k(b: bytes) -> list:
    scales, q, d, dmin = b[0:16], b[16:80], np.float32(_half(b, 80)), np.float32(_half(b, 82))
    y, qi, is_ = [], 0, 0
    for _ in range(0, 256, 128):
        for shift in (0, 2, 4, 6):
            for half in (0, 16):
                sc = scales[is_]
                is_ += 1
                dl, ml = d * np.float32(sc & 0xF), dmin * np.float32(sc >> 4)
                y += [dl * np.float32((q[qi + half + ll] >> shift) & 3) - ml for ll in range(16)]
        qi += 32
    return y


REFERENCES = {
    "Q8_0": (34, [0], _ref_q8_0),
    "Q4_0": (18, [0], _ref_q4_0),
    "Q4_1": (20, [0, 2], _ref_q4_1),
    "Q5_0": (22, [0], _ref_q5_0),
    "Q4_K": (144, [0, 2], _ref_q4_k),
    "Q6_K": (210, [208], _ref_q6_k),
    "Q2_K": (84, [80, 82], _ref_q2_k),
}


@pytest.mark.parametrize("type_name", sorted(REFERENCES))
def test_blocks_match_ggml_loops(type_name):
    nbytes, halves, reference = REFERENCES[type_name]
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 256, size=(3, nbytes), dtype=np.uint8)
    for at in halves:  # finite fp16 scales
        raw[:, at : at + 2] = (rng.random(3) * 0.1 + 0.01).astype("<f2").view(np.uint8).reshape(3, 2)
    want = [v for block in raw for v in reference(block.tobytes())]
    assert blocks.dense(type_name, raw.reshape(-1)).tolist() == [float(v) for v in want]
    if type_name in blocks.AFFINE_BITS:  # and the affine triple is the same numbers
        codes, scales, biases = blocks.affine(type_name, raw.reshape(-1), 32)
        assert (codes * scales + biases).reshape(-1).tolist() == [float(v) for v in want]


def test_q4_k_odd_groups_use_their_own_scale():
    """mlx 0.32's GGUF loader (gguflib) decodes group 2k+1 with group 2k's scale and min."""
    raw = np.zeros(144, np.uint8)
    raw[0:2] = np.frombuffer(f16(1.0), np.uint8)  # d = 1, dmin = 0
    raw[4:8] = [1, 2, 3, 4]  # scales of groups 0-3
    raw[8:16] = [0, 0, 0, 0, 5, 6, 7, 8]  # groups 4-7 take their low bits from bytes 12-15
    raw[16:] = 0x11  # every code 1
    values = blocks.dense("Q4_K", raw).reshape(8, 32)
    assert values[:, 0].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]


@pytest.mark.parametrize("bits", [4, 5, 6, 8])
def test_pack_is_mlx_layout(bits):
    import mlx.core as mx

    codes = np.random.default_rng(bits).integers(0, 1 << bits, size=(3, 96), dtype=np.uint8)
    packed = blocks.pack(codes, bits, chunk_rows=2)
    assert packed.dtype == np.uint32 and packed.shape == (3, 96 * bits // 32)
    ones, zeros = mx.ones((3, 3)), mx.zeros((3, 3))
    back = mx.dequantize(mx.array(packed), ones, zeros, group_size=32, bits=bits)
    assert np.array_equal(np.array(back), codes.astype(np.float32))


def test_read_affine_in_chunks_equals_whole(tmp_path):
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, size=(10 * 4, 22), dtype=np.uint8)  # 10 rows of 128 Q5_0 values
    raw[:, 0:2] = np.full((40, 2), np.frombuffer(f16(0.25), np.uint8))
    (tmp_path / "t.bin").write_bytes(b"xyz" + raw.tobytes())
    data = blocks.GGUFBytes([tmp_path / "t.bin"])
    packed, scales, biases = blocks.read_affine(data, 3, "Q5_0", 10, 128, chunk_values=300)  # 2 rows a chunk
    codes, s, b = blocks.affine("Q5_0", raw.reshape(-1), 128)
    assert np.array_equal(packed, blocks.pack(codes, 5)) and np.array_equal(scales, s) and np.array_equal(biases, b)


def test_bytes_across_pieces(tmp_path):
    data = bytes(range(256)) * 4
    cuts = [0, 100, 101, 700, len(data)]
    pieces = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        pieces.append(tmp_path / f"p{i}")
        pieces[-1].write_bytes(data[a:b])
    source = blocks.GGUFBytes(pieces)
    assert source.size == len(data)
    for offset, n in [(0, 1024), (99, 3), (100, 1), (650, 100), (1000, 24), (5, 0)]:
        assert source.read(offset, n).tobytes() == data[offset : offset + n]
    with pytest.raises(ValueError, match="past the end"):
        source.read(1000, 25)
