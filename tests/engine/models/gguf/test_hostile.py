"""Hostile GGUF files: each one a clear one-line error (exit 2 on the CLI), nothing written,
and bounded time and memory where a hostile header used to cost gigabytes or seconds."""

import os
import shutil
import stat
import struct
import time
import tracemalloc
from pathlib import Path

import pytest

from app.cli.main import main
from engine import paths
from engine.errors import ChinwagError, ModelError
from engine.models.folders import STARTER_ID, STARTER_NAME
from tests.engine.models.gguf.test_importer import write_tiny_gguf

# GGUF metadata value types.
_U32, _I32, _F32, _BOOL, _STR, _ARR, _U64, _F64 = 4, 5, 6, 7, 8, 9, 10, 12


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _value(v) -> bytes:
    """(type, payload) for a Python value: int → u32/u64, float → f64, str, bool, list."""
    if isinstance(v, bool):
        return struct.pack("<I?", _BOOL, v)
    if isinstance(v, int):
        return struct.pack("<IQ", _U64, v) if v >= 1 << 32 else struct.pack("<II", _U32, v)
    if isinstance(v, float):
        return struct.pack("<Id", _F64, v)
    if isinstance(v, str):
        return struct.pack("<I", _STR) + _s(v)
    if isinstance(v, list):
        if all(isinstance(x, str) for x in v):
            return struct.pack("<IIQ", _ARR, _STR, len(v)) + b"".join(_s(x) for x in v)
        if all(isinstance(x, float) for x in v):
            return struct.pack("<IIQ", _ARR, _F32, len(v)) + struct.pack(f"<{len(v)}f", *v)
        return struct.pack("<IIQ", _ARR, _I32, len(v)) + struct.pack(f"<{len(v)}i", *v)
    raise TypeError(v)


def gguf_bytes(meta: dict, tensors=(("token_embd.weight", (4, 4)),)) -> bytes:
    """A hand-written GGUF v3: the metadata given, F32 tensors of zeros."""
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for key, value in meta.items():
        head += _s(key) + _value(value)
    offset, sizes = 0, []
    for name, shape in tensors:
        head += _s(name) + struct.pack(f"<I{len(shape)}QIQ", len(shape), *shape, 0, offset)
        n = 4
        for d in shape:
            n *= d
        sizes.append(n)
        offset += (n + 31) // 32 * 32
    return head + b"\0" * ((-len(head)) % 32) + b"\0" * offset


def llama_meta(**extra) -> dict:
    meta = {
        "general.architecture": "llama",
        "general.name": "hostile",
        "llama.embedding_length": 4,
        "llama.block_count": 1,
        "llama.feed_forward_length": 8,
        "llama.attention.head_count": 2,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": ["a", "b", "c", "d"],
    }
    meta.update(extra)
    return {k: v for k, v in meta.items() if v is not None}


def write(path: Path, meta: dict, **kw) -> Path:
    path.write_bytes(gguf_bytes(meta, **kw))
    return path


def refuse(path: Path) -> str:
    """read + check, as the registry and every import do; the one-line ModelError's text."""
    from engine.models.gguf.checks import check_importable
    from engine.models.gguf.header import read_gguf_header

    with pytest.raises(ModelError) as info:
        check_importable(read_gguf_header(path))
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return message


def cli_refuses(path: Path, capsys, *needles) -> None:
    """`chinwag import` prints one error line, exits 2 and writes no model folder."""
    assert main(["import", str(path)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("[")]
    assert len(err) == 1 and err[0].startswith("chinwag: error: "), err
    for needle in needles:
        assert needle in err[0]
    assert [p.name for p in paths.models_dir().iterdir()] == []


@pytest.mark.timing
def test_block_count_bomb_is_refused_in_bounded_memory_and_time(tmp_path, capsys):
    path = write(tmp_path / "bomb.gguf", llama_meta(**{"llama.block_count": 2**32 - 1}))
    assert path.stat().st_size < 4096
    tracemalloc.start()
    started = time.perf_counter()
    try:
        message = refuse(path)
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "block_count" in message
    assert elapsed < 5.0 and peak < 20 << 20, (elapsed, peak)  # milliseconds here; the bomb took 17 s
    cli_refuses(path, capsys, "block_count")


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("general.alignment", 0.5, "general.alignment"),
        ("general.alignment", "0", "general.alignment"),
        ("general.alignment", [32, 32], "general.alignment"),
        ("general.alignment", 0, "general.alignment"),
        ("general.alignment", 48, "general.alignment"),
        ("split.count", "two", "split.count"),
        ("llama.attention.head_count", 0, "head_count"),
        ("llama.attention.head_count", "4", "head_count"),
        ("llama.attention.head_count_kv", [2, 2], "head_count_kv"),
        ("llama.embedding_length", 2**40, "embedding_length"),
        ("llama.rope.freq_base", "fast", "freq_base"),
        ("llama.attention.head_count", 3, "multiple"),
    ],
)
def test_bad_metadata_values_are_one_line_errors(tmp_path, capsys, key, value, needle):
    path = write(tmp_path / "bad.gguf", llama_meta(**{key: value}))
    assert needle in refuse(path)
    cli_refuses(path, capsys, needle)


def test_big_metadata_arrays_cost_little_memory(tmp_path):
    from engine.models.gguf.header import read_gguf_header

    # 20 MB of an array nobody reads: skipped even when the importer keeps arrays.
    junk = [0.0] * 5_000_000
    path = write(tmp_path / "junk.gguf", llama_meta(**{"general.junk": junk}))
    del junk
    tracemalloc.start()
    try:
        header = read_gguf_header(path, keep_arrays=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert header.metadata["tokenizer.ggml.tokens"] == ["a", "b", "c", "d"]
    assert peak < 10 << 20, peak
    # A tokenizer array longer than any vocabulary is refused before it is built.
    path = write(tmp_path / "scores.gguf", llama_meta(**{"tokenizer.ggml.scores": [0.0] * 1_500_000}))
    with pytest.raises(ModelError, match="1500000 items"):
        read_gguf_header(path, keep_arrays=True)


@pytest.mark.timing
def test_long_sentencepiece_piece_is_refused_quickly():
    from engine.models.gguf.tokenizer import build_tokenizer

    tokens = ["<unk>", "<s>", "</s>", "a", "b", "ab" * 100_000]
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": [2, 3, 3, 1, 1, 1],
    }
    started = time.perf_counter()
    with pytest.raises(ModelError, match="200000 characters"):
        build_tokenizer(meta)
    assert time.perf_counter() - started < 5.0  # milliseconds here; the quadratic merge took 6.5 s


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("tokenizer.ggml.tokens", [1, 2, 3], "tokenizer.ggml.tokens"),
        ("tokenizer.ggml.scores", [0.5], "entries for 4 tokens"),
        ("tokenizer.ggml.merges", ["ab"], "without a space"),
    ],
)
def test_bad_tokenizer_arrays_are_model_errors(key, value, needle):
    from engine.models.gguf.tokenizer import build_tokenizer

    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "c", "ab"], key: value}
    with pytest.raises(ModelError, match=needle):
        build_tokenizer(meta)


def test_wrong_shapes_are_refused_at_import(tiny_model_path, tmp_path, capsys):
    import mlx.core as mx

    # The metadata says 4 KV heads; the K and V tensors hold 2: it would import and never load.
    path = write_tiny_gguf(
        tiny_model_path,
        tmp_path / "shapes.gguf",
        meta_overrides={"llama.attention.head_count_kv": mx.array(4, dtype=mx.uint32)},
    )
    assert "blk.0.attn_k.weight" in refuse(path) or "attn_k" in refuse(path)
    cli_refuses(path, capsys, "shape")


def test_a_gguf_named_like_the_starter_does_not_take_its_id(tiny_model_path, tmp_path):
    from engine.models import registry
    from engine.models.gguf.importer import import_gguf

    path = write_tiny_gguf(tiny_model_path, tmp_path / f"{STARTER_ID}.gguf")
    info = import_gguf(path)
    assert info.id != STARTER_ID and info.status == "ready"
    starter = [m for m in registry.list_models() if m.id == STARTER_ID]
    assert starter and starter[0].source == "starter" and starter[0].name == STARTER_NAME


def test_read_only_gguf_imports_and_is_not_touched(tiny_model_path, tmp_path, monkeypatch):
    import mlx.core as mx

    from engine.models.gguf.importer import import_gguf

    path = write_tiny_gguf(tiny_model_path, tmp_path / "ro.gguf")
    before = path.read_bytes()
    path.chmod(0o444)
    real_load = mx.load

    def load(file, *args, **kwargs):
        # As MLX does for a user who may not write the file (root may, so say it here).
        if str(file).endswith(".gguf") and not os.stat(file).st_mode & stat.S_IWUSR:
            raise RuntimeError("[load_gguf] gguf_init failed")
        return real_load(file, *args, **kwargs)

    monkeypatch.setattr(mx, "load", load)
    info = import_gguf(path)
    assert info.status == "ready"
    assert path.read_bytes() == before and stat.S_IMODE(path.stat().st_mode) == 0o444
    assert not list(Path(info.path).glob("*.gguf"))  # the temporary copy is gone


def test_escape_sequences_in_a_gguf_never_reach_the_terminal(tiny_model_path, tmp_path, capsys):
    path = write_tiny_gguf(tiny_model_path, tmp_path / "evil.gguf", name="Evil\x1b]0;pwned\x07\x1b[31m Model")
    assert main(["import", str(path)]) == 0
    out = capsys.readouterr()
    assert "\x1b" not in out.out + out.err and "Evil" in out.out
    bad = write(tmp_path / "evil2.gguf", llama_meta(**{"general.architecture": "gpt\x1b[2J"}))
    assert "\x1b" not in refuse(bad)


def test_unusable_gguf_is_listed_not_crashed_on(tmp_path, monkeypatch):
    from engine.models import registry

    # The registry describes the starter GGUF with the same checks: a hostile one is "unusable".
    bad = write(tmp_path / "starter.gguf", llama_meta(**{"general.alignment": 0.5}))
    monkeypatch.setattr(registry, "starter_gguf_path", lambda: bad)
    starter = registry.list_models()[0]
    assert starter.status == "unusable" and "general.alignment" in starter.reason


def test_copy_of_gguf_is_not_needed_when_writable(tiny_model_path, tmp_path):
    from engine.models.gguf.importer import _writable_copy

    path = write_tiny_gguf(tiny_model_path, tmp_path / "rw.gguf")
    assert _writable_copy(path, tmp_path) == path
    path.chmod(0o444)
    copy = _writable_copy(path, tmp_path)
    assert copy != path and copy.read_bytes() == path.read_bytes()


def test_chinwag_error_drops_control_characters():
    assert str(ChinwagError("name \x1b[31mred\x9b and\nnext")) == "name [31mred and next"


def test_the_importer_does_not_import_the_registry():
    import subprocess
    import sys

    code = (
        "import sys, engine.models.gguf.importer, engine.models.gguf.checks, engine.models.folders; "
        "assert 'engine.models.registry' not in sys.modules; assert 'mlx' not in sys.modules"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[4],
    )
    assert proc.returncode == 0, proc.stderr


def test_a_header_claiming_too_many_tensors_is_refused_before_reading_them(tmp_path):
    head = b"GGUF" + struct.pack("<IQQ", 3, 100_000, 0)
    path = tmp_path / "many.gguf"
    path.write_bytes(head + b"\0" * (100_000 * 24))
    assert "implausible" in refuse(path)


def test_deeply_nested_json_in_model_folders_lists_as_unusable(tiny_model_path, tmp_path, chinwag_home):
    from engine.models import registry

    deep = "[" * 100_000 + "]" * 100_000
    folder = shutil.copytree(tiny_model_path, tmp_path / "deep-config")
    registry.add_model_folder(folder)
    (folder / "config.json").write_text(deep)
    listed = {m.path: m for m in registry.list_models()}
    assert listed[str(folder)].status == "unusable" and "config.json" in listed[str(folder)].reason
    (chinwag_home / "folders.json").write_text(deep)
    assert str(folder) not in {m.path for m in registry.list_models()}  # a broken list reads as empty


def test_merges_outside_the_vocabulary_are_a_model_error():
    from engine.models.gguf.tokenizer import build_tokenizer

    meta = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["a", "b", "ab"], "tokenizer.ggml.merges": ["x y"]}
    with pytest.raises(ModelError, match="out of vocabulary"):
        build_tokenizer(meta)
