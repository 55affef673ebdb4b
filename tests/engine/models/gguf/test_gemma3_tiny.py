"""Gemma 3 import on a tiny random model written as llama.cpp writes one: names, the norms'
added 1, the config llama.cpp leaves out, the turn-format template and the tokenizer."""

import json
from pathlib import Path

import pytest

from engine.errors import ModelError

# mlx-lm gemma3_text names -> llama.cpp's (the inverse of the importer's map).
_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
TINY = dict(hidden=64, heads=2, kv_heads=1, head_dim=32, ff=96, layers=7, window=16)


def _tokens() -> tuple:
    words = ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "at", "▁c", "▁s", "▁m", "th", "▁t", "he"]
    tokens = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", "\n"]
    tokens += [f"<0x{b:02X}>" for b in range(256)] + ["▁"] + list("thecasonm") + words
    types = [3, 3, 3, 2, 3, 3, 4] + [6] * 256 + [1] * (1 + 9 + len(words))
    scores = [0.0] * (len(tokens) - len(words)) + [-float(i) for i in range(len(words))]
    return tokens, types, scores


def _gguf_name(name: str) -> str:
    module, _, suffix = name.rpartition(".")
    if module == "model.embed_tokens":
        return f"token_embd.{suffix}"
    if module == "model.norm":
        return f"output_norm.{suffix}"
    _, _, layer, rest = module.split(".", 3)
    return f"blk.{layer}.{_TO_GGUF[rest]}.{suffix}"


def reference_model():
    """A random mlx-lm gemma3_text model (norms far from 0, so that a missed 1 shows)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten, tree_unflatten
    from mlx_lm.models import gemma3_text

    tokens, _, _ = _tokens()
    args = gemma3_text.ModelArgs(
        model_type="gemma3_text",
        hidden_size=TINY["hidden"],
        num_hidden_layers=TINY["layers"],
        intermediate_size=TINY["ff"],
        num_attention_heads=TINY["heads"],
        num_key_value_heads=TINY["kv_heads"],
        head_dim=TINY["head_dim"],
        query_pre_attn_scalar=TINY["head_dim"],  # llama.cpp's scale: 1/sqrt(head_dim)
        vocab_size=len(tokens),
        sliding_window=TINY["window"],
        max_position_embeddings=2048,
    )
    model = gemma3_text.Model(args)
    model.sanitize({})  # tied embeddings, as the GGUF has no output.weight
    mx.random.seed(0)
    params = {
        k: mx.random.normal(v.shape) * (0.5 if "norm" in k else 0.08) for k, v in tree_flatten(model.parameters())
    }
    model.update(tree_unflatten(list(params.items())))
    return model, params


def write_tiny_gemma3(out: Path, meta_overrides: dict | None = None) -> Path:
    import mlx.core as mx

    _, params = reference_model()
    tokens, types, scores = _tokens()
    # llama.cpp stores every norm with 1 added (Gemma's RMSNorm scales by 1 + weight).
    weights = {_gguf_name(k): v + 1 if k.endswith("norm.weight") else v for k, v in params.items()}
    u32 = lambda x: mx.array(x, dtype=mx.uint32)  # noqa: E731
    meta = {
        "general.architecture": "gemma3",
        "general.name": "Tiny Gemma",
        "gemma3.context_length": u32(2048),
        "gemma3.embedding_length": u32(TINY["hidden"]),
        "gemma3.block_count": u32(TINY["layers"]),
        "gemma3.feed_forward_length": u32(TINY["ff"]),
        "gemma3.attention.head_count": u32(TINY["heads"]),
        "gemma3.attention.head_count_kv": u32(TINY["kv_heads"]),
        "gemma3.attention.key_length": u32(TINY["head_dim"]),
        "gemma3.attention.value_length": u32(TINY["head_dim"]),
        "gemma3.attention.layer_norm_rms_epsilon": mx.array(1e-6, dtype=mx.float32),
        "gemma3.rope.freq_base": mx.array(1e6, dtype=mx.float32),
        "gemma3.attention.sliding_window": u32(TINY["window"]),
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": mx.array(scores, dtype=mx.float32),
        "tokenizer.ggml.token_type": mx.array(types, dtype=mx.int32),
        "tokenizer.ggml.bos_token_id": u32(2),
        "tokenizer.ggml.eos_token_id": u32(1),
        "tokenizer.ggml.unknown_token_id": u32(3),
        "tokenizer.ggml.padding_token_id": u32(0),
        "tokenizer.ggml.add_bos_token": mx.array(True),
        "tokenizer.ggml.add_space_prefix": mx.array(False),
    }
    for key, value in (meta_overrides or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    mx.save_gguf(str(out), weights, meta)
    return out


@pytest.fixture(scope="module")
def tiny_gemma(tmp_path_factory):
    from engine.models.gguf.importer import import_gguf

    root = tmp_path_factory.mktemp("gemma")
    info = import_gguf(write_tiny_gemma3(root / "tiny-gemma.gguf"), dest_root=root / "models")
    return Path(info.path)


def test_config_restores_what_llama_cpp_leaves_out(tiny_gemma):
    config = json.loads((tiny_gemma / "config.json").read_text())
    assert config["model_type"] == "gemma3_text" and config["architectures"] == ["Gemma3ForCausalLM"]
    assert (config["sliding_window"], config["sliding_window_pattern"]) == (16, 6)
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1e6, 1e4)
    assert config["head_dim"] == 32 and config["query_pre_attn_scalar"] == 32
    assert config["tie_word_embeddings"] is True and "rope_traditional" not in config
    assert config["eos_token_id"] == [1, 5]  # <eos>, and <end_of_turn> that the file does not name
    assert (config["bos_token_id"], config["pad_token_id"]) == (2, 0)


def test_imported_model_computes_the_reference(tiny_gemma):
    import mlx.core as mx
    import mlx_lm

    model, _ = mlx_lm.load(str(tiny_gemma))
    ref, _ = reference_model()
    x = mx.array([[2, 270, 271, 272, 273, 274] * 5])  # 30 tokens: past the 16-token window
    assert mx.allclose(model(x), ref(x), atol=1e-4).item()
    norm = model.model.layers[0].input_layernorm.weight
    assert mx.allclose(norm, ref.model.layers[0].input_layernorm.weight).item()  # 1 taken off


def test_tokenizer_adds_bos_and_no_space_prefix(tiny_gemma):
    from mlx_lm.tokenizer_utils import SPMStreamingDetokenizer
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    eos = json.loads((tiny_gemma / "config.json").read_text())["eos_token_id"]
    tok = load_tokenizer(tiny_gemma, eos_token_ids=eos)  # as engine/local/loading.py loads it
    ids = tok.encode("the cat sat")
    assert ids[0] == tok.bos_token_id == 2 and ids.count(2) == 1
    assert tok.convert_ids_to_tokens(ids[1:4]) == ["th", "e", "▁cat"]  # no "▁" in front: add_space_prefix is false
    assert tok.decode(ids[1:]) == "the cat sat"  # and none taken off
    assert isinstance(tok.detokenizer, SPMStreamingDetokenizer) and not tok.detokenizer.trim_space
    assert tok.eos_token_ids == {1, 5}


def test_turn_format_template(tiny_gemma):
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from engine.context.prompt import split_render

    tok = load_tokenizer(tiny_gemma)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": " Hi "},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Again"},
        {"role": "user", "content": "and again"},  # roles need not alternate
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<bos><start_of_turn>user\nBe brief.\n\n Hi <end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
        "<start_of_turn>user\nAgain<end_of_turn>\n<start_of_turn>user\nand again<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    prefixes, tail = split_render(tok, messages)
    assert len(prefixes) == len(messages)  # every message is its own piece: the cache can be reused
    assert tail == "<end_of_turn>\n<start_of_turn>model\n"
    ids = tok.encode(text, add_special_tokens=False)  # as engine/context/prompt.py encodes a prompt
    assert ids[:2] == [2, 4] and ids.count(2) == 1 and ids[-1] == 6  # <bos><start_of_turn> ... "\n"


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("gemma3.attention.sliding_window", None, "sliding_window"),
        ("gemma3.attention.value_length", 16, "value length"),
        ("gemma3.attention.sliding_window_pattern", 0, "sliding_window_pattern"),
    ],
)
def test_bad_gemma3_metadata_is_refused(tmp_path, key, value, match):
    import mlx.core as mx

    from engine.models.gguf.importer import import_gguf

    override = None if value is None else mx.array(value, dtype=mx.uint32)
    src = write_tiny_gemma3(tmp_path / "bad.gguf", {key: override})
    with pytest.raises(ModelError, match=match):
        import_gguf(src, dest_root=tmp_path / "models")
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_missing_gemma3_tensor_is_refused(tmp_path):
    import mlx.core as mx

    from engine.models.gguf.importer import import_gguf

    src = write_tiny_gemma3(tmp_path / "full.gguf")
    weights, meta = mx.load(str(src), return_metadata=True)
    del weights["blk.3.post_ffw_norm.weight"]
    mx.save_gguf(str(tmp_path / "holey.gguf"), weights, meta)
    with pytest.raises(ModelError, match="blk.3.post_ffw_norm.weight"):
        import_gguf(tmp_path / "holey.gguf", dest_root=tmp_path / "models")
