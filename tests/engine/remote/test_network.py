"""engine/remote/network.py without a server: lines out of bytes, bounded; bodies inflated in pieces."""

import zlib

import pytest

from engine.remote import errors, network


def test_lines_end_at_cr_lf_or_crlf_across_pieces_and_none_is_longer_than_the_bound():
    lines = network.Lines(8)
    got = []
    for piece in (b"a\r", b"\nb\rc\n", b"\r", b"\r\nd"):
        got += lines.feed(piece)
    assert got + lines.end() == ["a", "b", "c", "", "", "d"]
    lines = network.Lines(8)
    assert lines.feed(b"ok\n" + b"x" * 20) == ["ok"]  # the line that ended goes out first
    with pytest.raises(errors.StreamLimit, match="a line over 8 bytes"):
        lines.feed(b"x")
    with pytest.raises(errors.StreamLimit, match="a line over 8 bytes"):
        network.Lines(8).feed(b"y" * 9 + b"\n")


def test_a_gzip_bomb_inflates_in_bounded_pieces():
    z = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    bomb = z.compress(b"\0" * (32 << 20)) + z.flush()  # 32 MB in ~32 KB
    pieces = network.Inflater("gzip").feed(bomb)
    sizes = [len(next(pieces)) for _ in range(4)]
    assert sizes == [network._PIECE] * 4  # nothing inflated beyond what was asked for
