"""Gemma 3 GGUFs (llama.cpp's `gemma3` architecture) as mlx-lm `gemma3_text` folders.

What llama.cpp's conversion changed, or left out of the metadata, and this undoes or restores:

- every `*norm.weight` was stored with 1 already added (Gemma's RMSNorm scales by 1 + weight,
  and llama.cpp's norm by the weight alone); mlx-lm's gemma3_text adds 1 itself, so 1 is taken off;
- the local (sliding-window) layers' pattern, one global layer in 6, and their RoPE base, 10,000,
  are constants in llama.cpp's source (llama-model.cpp), not metadata: used unless the file says;
- Q and K rows are not permuted (Gemma's RoPE is the NeoX, non-interleaved one);
- the base GGUF has no chat template: Gemma's turn format is written here.

No MLX here: the importer passes the arrays in.
"""

from typing import Any

from engine.models.gguf.header import GGUFHeader

NORM_SHIFT = 1.0
SLIDING_WINDOW_PATTERN = 6  # llama.cpp: hparams.set_swa_pattern(6)
LOCAL_ROPE_BASE = 10_000.0  # llama.cpp: hparams.rope_freq_base_train_swa
END_OF_TURN = "<end_of_turn>"
START_OF_TURN = "<start_of_turn>"

# Gemma's turn format (as Google's instruction-tuned templates write it): a system prompt opens
# the first user turn, an assistant's turn is the "model"'s. Unlike those templates it neither
# trims the text nor insists that roles alternate, so each message's text is its piece of the
# prompt (engine/context/prompt.py cuts the rendered prompt at each message) and any history renders.
CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else 'user' -%}"
    "{%- set opens_first_turn = loop.first and message['role'] == 'system'"
    " and messages | length > 1 and messages[1]['role'] == 'user' -%}"
    "{%- if not (loop.index0 == 1 and messages[0]['role'] == 'system' and message['role'] == 'user') -%}"
    "{{- '<start_of_turn>' + role + '\\n' -}}"
    "{%- endif -%}"
    "{{- message['content'] -}}"
    "{%- if opens_first_turn -%}{{- '\\n\\n' -}}{%- else -%}{{- '<end_of_turn>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)


def is_norm(gguf_name: str) -> bool:
    """A norm's weight ('blk.3.post_ffw_norm.weight', 'output_norm.weight'): stored with 1 added."""
    return gguf_name.endswith("norm.weight")


def _positive(header: GGUFHeader, key: str, default: float) -> float:
    value = header.arch_value(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else default


def build_config(
    header: GGUFHeader, vocab_size: int, tied: bool, rope_scaling: dict[str, Any] | None
) -> dict[str, Any]:
    """config.json for mlx-lm's gemma3_text (the sizes are checked by checks.hyperparameters first)."""
    get = header.arch_value
    hidden, heads, layers = int(get("embedding_length")), int(get("attention.head_count")), int(get("block_count"))
    head_dim = int(get("attention.key_length", hidden // heads))
    pattern = get("attention.sliding_window_pattern")
    config: dict[str, Any] = {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": _positive(header, "attention.layer_norm_rms_epsilon", 1e-6),
        "vocab_size": vocab_size,
        "max_position_embeddings": header.context_length or 32768,
        "rope_theta": _positive(header, "rope.freq_base", 1_000_000.0),
        "rope_local_base_freq": _positive(header, "rope.freq_base_swa", LOCAL_ROPE_BASE),
        # llama.cpp scales queries by 1/sqrt(head_dim), except 27B's (62 layers) by 1/sqrt(hidden / heads).
        # (An int: transformers checks config.json's types when mlx-lm loads the tokenizer.)
        "query_pre_attn_scalar": hidden // heads if layers == 62 else head_dim,
        "sliding_window": int(get("attention.sliding_window")),
        "sliding_window_pattern": int(pattern) if isinstance(pattern, int) else SLIDING_WINDOW_PATTERN,
        "hidden_activation": "gelu_pytorch_tanh",
        "tie_word_embeddings": tied,
    }
    if rope_scaling:
        config["rope_scaling"] = rope_scaling
    return config


def end_of_turn_id(meta: dict[str, Any]) -> int | None:
    tokens = meta.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list):
        return None
    try:
        return tokens.index(END_OF_TURN)
    except ValueError:
        return None
