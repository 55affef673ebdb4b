"""A GGUF stored as consecutive pieces (a package's chunks) reads and imports as the whole file."""

import json
from pathlib import Path

import pytest

from engine.errors import ModelError
from engine.models.gguf.header import read_gguf_header
from tests.engine.models.gguf.test_importer import write_tiny_gguf


@pytest.fixture(scope="module")
def whole_and_pieces(tiny_model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pieces")
    whole = write_tiny_gguf(tiny_model_path, folder / "Tiny.gguf")
    data = whole.read_bytes()
    header_end = read_gguf_header(whole).data_offset
    cuts = [0, header_end + 1000, len(data) // 2, len(data) // 2 + 7, len(data)]  # pieces cut mid-tensor
    pieces = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        pieces.append(folder / f"Tiny.gguf.part{i:02d}")
        pieces[-1].write_bytes(data[a:b])
    return whole, tuple(pieces)


def test_header_from_pieces_is_the_whole_files(whole_and_pieces):
    whole, pieces = whole_and_pieces
    a, b = read_gguf_header(whole), read_gguf_header(pieces)
    assert b.parts == pieces and b.files == pieces and a.files == (whole,)
    assert (a.metadata, a.tensors, a.data_offset) == (b.metadata, b.tensors, b.data_offset)


def test_a_missing_piece_is_a_truncated_file(whole_and_pieces):
    _, pieces = whole_and_pieces
    with pytest.raises(ModelError, match="past the end"):
        read_gguf_header(pieces[:-1])
    with pytest.raises(ModelError, match="not found"):
        read_gguf_header(pieces[:1] + (pieces[0].with_name("nope"),))


def test_pieces_import_like_the_file(whole_and_pieces, tiny_model_path):
    """The pieces go through the numpy reader, the file through mx.load: the same folder comes out."""
    import mlx.core as mx

    from engine.models.gguf.importer import import_gguf

    whole, pieces = whole_and_pieces
    a = Path(import_gguf(whole).path)
    b_info = import_gguf(list(pieces), model_id="from-pieces")
    b = Path(b_info.path)
    assert b.name == "from-pieces" and b_info.status == "ready"
    wa, wb = mx.load(str(a / "model.safetensors")), mx.load(str(b / "model.safetensors"))
    assert sorted(wa) == sorted(wb)
    assert all(mx.array_equal(wa[k], wb[k]).item() for k in wa)
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        assert json.loads((a / name).read_text()) == json.loads((b / name).read_text())
    record = json.loads((b / "chinwag.json").read_text())
    assert record["source_path"] == str(pieces[0]) and record["source_size"] == whole.stat().st_size
    stamp = (b / "model.safetensors").stat().st_mtime_ns
    assert import_gguf(list(pieces), model_id="from-pieces") == b_info  # the same pieces: reused
    assert (b / "model.safetensors").stat().st_mtime_ns == stamp
