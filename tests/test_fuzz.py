"""Fuzzing the two readers of files a stranger may hand a user: the GGUF header reader and the
conversation JSON importer. Any bytes give a valid result or a one-line ChinwagError, never
another exception, within a time and memory bound."""

import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import ChinwagError
from tests.engine.models.gguf.test_hostile import gguf_bytes, llama_meta

# Generous: a hostile input used to cost seconds and gigabytes; a loaded machine costs less.
SECONDS = 5.0
PEAK_BYTES = 64 << 20

_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _bounded(fn):
    """fn() within the time and memory bound; its result."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        result = fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert elapsed < SECONDS and peak < PEAK_BYTES, (elapsed, peak)
    return result


# -- GGUF ----------------------------------------------------------------------

_scalars = st.one_of(st.integers(0, 2**64 - 1), st.floats(allow_nan=True), st.text(max_size=20), st.booleans())
_values = st.one_of(
    _scalars,
    st.lists(st.integers(-(2**31), 2**31 - 1), max_size=8),
    st.lists(st.text(max_size=8), max_size=8),
    st.lists(st.floats(width=32), max_size=8),
)
_keys = st.sampled_from(
    [
        "general.alignment",
        "general.name",
        "general.architecture",
        "split.count",
        "llama.block_count",
        "llama.embedding_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.feed_forward_length",
        "llama.context_length",
        "llama.attention.key_length",
        "llama.rope.freq_base",
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.scores",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
    ]
)
_shapes = st.lists(st.integers(0, 70), min_size=0, max_size=3).map(tuple)
_tensors = st.lists(
    st.tuples(
        st.sampled_from(["token_embd.weight", "output_norm.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "x"]),
        _shapes,
    ),
    max_size=4,
)


# Every tensor llama_meta() implies (hidden 4, 2 heads, feed-forward 8, one block, 4 tokens):
# with these, hostile metadata reaches the tokenizer build too.
_COMPLETE = (
    ("token_embd.weight", (4, 4)),
    ("output_norm.weight", (4,)),
    *((f"blk.0.{n}.weight", (4, 4)) for n in ("attn_q", "attn_k", "attn_v", "attn_output")),
    ("blk.0.ffn_gate.weight", (4, 8)),
    ("blk.0.ffn_up.weight", (4, 8)),
    ("blk.0.ffn_down.weight", (8, 4)),
    ("blk.0.attn_norm.weight", (4,)),
    ("blk.0.ffn_norm.weight", (4,)),
)


@st.composite
def gguf_files(draw):
    """Raw bytes, or a GGUF built from hostile metadata and then cut or corrupted."""
    if draw(st.booleans()):
        return b"GGUF" + draw(st.binary(max_size=400))
    meta = llama_meta()
    for key, value in draw(st.dictionaries(_keys, _values, max_size=5)).items():
        if isinstance(value, float) and value != value:
            value = 0.5
        meta[key] = value
    tensors = _COMPLETE if draw(st.booleans()) else tuple(draw(_tensors))
    data = bytearray(gguf_bytes(meta, tensors=tensors))
    for _ in range(draw(st.integers(0, 3))):
        if data:
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[:cut]) if draw(st.booleans()) else bytes(data)


def _read_and_check(path: Path):
    from engine.models.gguf.checks import check_importable
    from engine.models.gguf.header import read_gguf_header
    from engine.models.gguf.importer import slugify

    for keep_arrays in (False, True):
        try:
            header = read_gguf_header(path, keep_arrays=keep_arrays)
        except ChinwagError as e:
            assert "\n" not in str(e) and "\x1b" not in str(e)
            continue
        # What the registry and the importer read from every header must not raise.
        header.name, header.context_length, header.type_counts(), slugify(header.name)
        try:
            check_importable(header)
            if keep_arrays:  # what the import builds next from the same metadata
                from engine.models.gguf.tokenizer import build_tokenizer, build_tokenizer_config

                build_tokenizer(header.metadata)
                build_tokenizer_config(header.metadata, {"max_position_embeddings": 8})
        except ChinwagError as e:
            assert "\n" not in str(e)


@_FUZZ
@given(gguf_files())
def test_gguf_header_fuzz(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.gguf"
        path.write_bytes(data)
        _bounded(lambda: _read_and_check(path))


# -- conversation JSON ---------------------------------------------------------

_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20,
)
_fields = st.sampled_from(
    [
        "title",
        "created_at",
        "updated_at",
        "model_id",
        "settings",
        "role",
        "content",
        "status",
        "stats",
        "temperature",
        "max_tokens",
        "top_k",
        "system_prompt",
    ]
)


@st.composite
def exports(draw):
    """Raw bytes, or an export whose fields are replaced by hostile JSON."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.binary(max_size=300))
    conv = {"title": "t", "settings": {}}
    conv.update(draw(st.dictionaries(_fields, _json, max_size=3)))
    if draw(st.booleans()):
        conv["settings"] = draw(st.dictionaries(_fields, _json, max_size=3))
    messages = [
        dict({"role": "user", "content": "hi"}, **draw(st.dictionaries(_fields, _json, max_size=3)))
        for _ in range(draw(st.integers(0, 3)))
    ]
    data = {
        "format": "chinwag-conversation",
        "version": draw(st.sampled_from([1, 1, 2, 0, "1", None])),
        "conversation": conv,
        "messages": messages,
    }
    text = json.dumps(data, allow_nan=True)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    return text.encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    from app.core.store import Store

    with Store(tmp_path_factory.mktemp("fuzz-store") / "chinwag.db") as store:
        yield store


@_FUZZ
@given(data=exports())
def test_conversation_import_fuzz(fuzz_store, data):
    from app.cli.transcripts import _when
    from app.transcripts.export import to_html, to_json, to_markdown
    from app.transcripts.json_import import import_conversation

    store = fuzz_store
    before = len(store.list_conversations())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "in.json"
        path.write_bytes(data)
        try:
            conv = _bounded(lambda: import_conversation(store, path))
        except ChinwagError as e:
            assert "\n" not in str(e)
            assert len(store.list_conversations()) == before  # nothing half-written
            return
    # What every later command does with an imported chat must work.
    back = store.get_conversation(conv.id)
    [_when(s.updated_at) for s in store.list_conversations()]
    to_json(back), to_markdown(back), to_html(back)
