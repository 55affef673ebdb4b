"""Tiny random-weight mlx-lm models, one per model family, for the KV-cache tests.

Each family's real mlx-lm classes (``mlx_lm.utils._get_classes``) are built at hidden size 64
with the tiny BPE tokenizer of ``tests/tiny_model.py``, in float32, with just enough layers
that every cache kind of the family appears. Sliding windows are ``WINDOW`` tokens, so a chat
of a few hundred tokens wraps them many times. Recurrent layers are set to decay slowly, so
their state remembers the start of a prompt: a recurrent state restored at the wrong
position changes the greedy continuation. The repos of multimodal models (gemma3, gemma4,
mistral3) are written as mlx-community converts them: the text model's config under
``text_config``, its weights under ``language_model.``, no vision or audio tower.

``build_family_model(path, family)`` writes a folder that ``mlx_lm.load`` opens;
``family_model_path(tmp_path_factory, family)`` builds it once per test session.
"""

import copy
import json
from pathlib import Path

from tests.tiny_model import CHATML_TEMPLATE, CONFIG, build_tiny_model, build_tokenizer

WINDOW = 32

# Shared by the attention layers of most families: 4 query heads of 16, 2 KV heads.
_ATTENTION = {
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "intermediate_size": 128,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
}
# A mamba2 mixer of 4 heads of 16 (inner width 64), state 16: mamba2, falcon_h1, nemotron_h
# and granitemoehybrid spell these fields differently.
_MAMBA_HEADS, _MAMBA_HEAD_DIM, _MAMBA_STATE, _MAMBA_CONV = 4, 16, 16, 4
# MLA: the cache holds one latent of width kv_lora_rank and one shared rope key per token.
_MLA = {
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 16,
    "v_head_dim": 16,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 32,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
    "norm_topk_prob": True,
    "routed_scaling_factor": 1.0,
}
# Qwen3-Next and Qwen3.5's gated delta nets: 2 key heads of 32, 4 value heads of 16.
_GATED_DELTA = {
    "linear_num_key_heads": 2,
    "linear_key_head_dim": 32,
    "linear_num_value_heads": 4,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
}
_SLIDING_FULL = ["sliding_attention", "full_attention"]
# Layer 0 slides (RotatingKVCache), layer 1 is global (KVCache).
_GEMMA3_TEXT = {
    "model_type": "gemma3_text",
    **_ATTENTION,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "query_pre_attn_scalar": 16,
    "sliding_window": WINDOW,
    "sliding_window_pattern": 2,
    "rms_norm_eps": 1e-6,
}
# Layers 2 and 3 share the KV of layers 0 and 1 (num_kv_shared_layers): make_cache returns
# 2 caches for 4 layers. Global layers have their own head_dim and a partial rope.
_GEMMA4_TEXT = {
    "model_type": "gemma4_text",
    **_ATTENTION,
    "num_key_value_heads": 1,
    "num_hidden_layers": 4,
    "layer_types": _SLIDING_FULL * 2,
    "sliding_window": WINDOW,
    "global_head_dim": 32,
    "num_kv_shared_layers": 2,
    "hidden_size_per_layer_input": 8,
    "vocab_size_per_layer_input": 512,
    "rms_norm_eps": 1e-6,
}
# Ministral 3's yarn rope, with queries scaled by position (llama_4_scaling_beta).
_MINISTRAL3_ROPE = {
    "rope_type": "yarn",
    "rope_theta": 1000000.0,
    "factor": 4.0,
    "original_max_position_embeddings": 1024,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 1.0,
    "llama_4_scaling_beta": 0.1,
}

FAMILIES: dict[str, dict] = {
    "llama": CONFIG,
    # Llama with rope left out of every no_rope_layer_interval-th layer (layer 1 here).
    "smollm3": {
        "model_type": "smollm3",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "no_rope_layer_interval": 2,
        "tie_word_embeddings": True,
        # transformers' defaults (128000...) are outside the tiny vocab: <|im_end|>, <|endoftext|>.
        "bos_token_id": None,
        "eos_token_id": 2,
        "pad_token_id": 0,
    },
    # mlx-lm maps model_type "mistral" to its llama module, which reads layer_types (Ministral 8B's
    # interleaved sliding window); ministral3 (Ministral 3) reads them too and scales queries by
    # position (llama_4_scaling_beta).
    "mistral": {
        "model_type": "mistral",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "layer_types": _SLIDING_FULL,
        "sliding_window": WINDOW,
        "tie_word_embeddings": False,
    },
    "ministral3": {
        "model_type": "ministral3",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "layer_types": _SLIDING_FULL,
        "sliding_window": WINDOW,
        "tie_word_embeddings": False,
        "rope_parameters": _MINISTRAL3_ROPE,
    },
    # The repo of a multimodal model (Ministral 3 with its vision tower): a text_config of the
    # ministral3 text model, all layers global as in Ministral 3, weights under language_model.
    "mistral3": {
        "model_type": "mistral3",
        "text_config": {
            "model_type": "ministral3",
            **_ATTENTION,
            "num_hidden_layers": 2,
            "tie_word_embeddings": False,
            "rope_parameters": _MINISTRAL3_ROPE,
        },
    },
    # Per-head RMSNorm of queries and keys (q_norm, k_norm).
    "qwen3": {
        "model_type": "qwen3",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "tie_word_embeddings": False,
    },
    "qwen3_moe": {
        "model_type": "qwen3_moe",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "norm_topk_prob": True,
        "tie_word_embeddings": False,
    },
    "gemma3_text": _GEMMA3_TEXT,
    # Gemma 3 4B and up: the multimodal repo, gemma3_text under text_config (language_model.*).
    "gemma3": {"model_type": "gemma3", "text_config": _GEMMA3_TEXT},
    "gemma4_text": _GEMMA4_TEXT,
    "gemma4": {"model_type": "gemma4", "text_config": _GEMMA4_TEXT},
    "gpt_oss": {
        "model_type": "gpt_oss",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "layer_types": _SLIDING_FULL,
        "sliding_window": WINDOW,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "intermediate_size": 64,
    },
    # Global layers use no rope; sliding ones do.
    "cohere2": {
        "model_type": "cohere2",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "sliding_window": WINDOW,
        "sliding_window_pattern": 2,
        "layer_norm_eps": 1e-5,
        "eos_token_id": 2,  # <|im_end|>: transformers' default is outside the tiny vocab
    },
    "olmo3": {
        "model_type": "olmo3",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "layer_types": _SLIDING_FULL,
        "sliding_window": WINDOW,
        "eos_token_id": 2,
    },
    # Layers 0-2 are gated delta nets (ArraysCache of conv state and recurrent state), layer 3 attends.
    "qwen3_next": {
        "model_type": "qwen3_next",
        **_ATTENTION,
        **_GATED_DELTA,
        "num_hidden_layers": 4,
        "partial_rotary_factor": 0.25,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "norm_topk_prob": True,
    },
    # A flat config (no text_config): qwen3_5's ModelArgs wraps it as the text model's.
    "qwen3_5": {
        "model_type": "qwen3_5",
        **_ATTENTION,
        **_GATED_DELTA,
        "num_hidden_layers": 4,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
    },
    # Short convolutions (ArraysCache of the last conv_L_cache - 1 inputs) around attention layers.
    "lfm2": {
        "model_type": "lfm2",
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 4,
        "layer_types": ["conv", "full_attention", "conv", "full_attention"],
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_ff_dim": 128,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "rope_theta": 10000.0,
    },
    "mamba2": {
        "model_type": "mamba2",
        "hidden_size": 64,
        "num_hidden_layers": 4,
        "num_heads": _MAMBA_HEADS,
        "head_dim": _MAMBA_HEAD_DIM,
        "intermediate_size": _MAMBA_HEADS * _MAMBA_HEAD_DIM,
        "state_size": _MAMBA_STATE,
        "conv_kernel": _MAMBA_CONV,
        "n_groups": 1,
        "layer_norm_epsilon": 1e-5,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": True,
        "time_step_limit": [0.001, 100.0],
        "time_step_rank": "auto",
        "expand": 1,  # transformers (which mlx_lm.load's tokenizer loading asks) checks this
    },
    # Every layer runs a mamba mixer and an attention side by side: one CacheList(ArraysCache,
    # KVCache) per layer.
    "falcon_h1": {
        "model_type": "falcon_h1",
        **_ATTENTION,
        "num_hidden_layers": 2,
        "mamba_n_heads": _MAMBA_HEADS,
        "mamba_d_head": _MAMBA_HEAD_DIM,
        "mamba_d_ssm": _MAMBA_HEADS * _MAMBA_HEAD_DIM,
        "mamba_d_state": _MAMBA_STATE,
        "mamba_d_conv": _MAMBA_CONV,
        "mamba_n_groups": 1,
        "mamba_rms_norm": True,
    },
    # Blocks M (mamba), * (attention, no rope), - (MLP), E (MoE): only M and * have a cache.
    "nemotron_h": {
        "model_type": "nemotron_h",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "attention_bias": False,
        "hybrid_override_pattern": "M*M-E",
        "mamba_num_heads": _MAMBA_HEADS,
        "mamba_head_dim": _MAMBA_HEAD_DIM,
        "mamba_proj_bias": False,
        "ssm_state_size": _MAMBA_STATE,
        "conv_kernel": _MAMBA_CONV,
        "n_groups": 1,
        "mlp_bias": False,
        "layer_norm_epsilon": 1e-5,
        "use_bias": False,
        "use_conv_bias": True,
        "n_routed_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "n_shared_experts": 1,
        "moe_shared_expert_intermediate_size": 32,
        "n_group": 1,
        "topk_group": 1,
        "norm_topk_prob": True,
        "routed_scaling_factor": 1.0,
    },
    # Granite 4.0-H: mamba and attention (no rope) layers, each followed by MoE + shared MLP.
    "granitemoehybrid": {
        "model_type": "granitemoehybrid",
        "hidden_size": 64,
        "intermediate_size": 32,
        "num_hidden_layers": 4,
        "layer_types": ["mamba", "attention", "mamba", "mamba"],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "attention_bias": False,
        "embedding_multiplier": 2.0,  # Granite's 12 makes the embedding drown the mixers: a bigram model
        "attention_multiplier": 0.25,
        "logits_scaling": 4.0,
        "residual_multiplier": 0.5,
        "rms_norm_eps": 1e-5,
        "position_embedding_type": "nope",
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 64,
        "mamba_n_heads": _MAMBA_HEADS,
        "mamba_d_head": _MAMBA_HEAD_DIM,
        "mamba_d_state": _MAMBA_STATE,
        "mamba_d_conv": _MAMBA_CONV,
        "mamba_n_groups": 1,
        "mamba_proj_bias": False,
        "mamba_conv_bias": True,
        "mamba_expand": 1,  # transformers checks mamba_n_heads * mamba_d_head = mamba_expand * hidden_size
    },
    # MLA (multi-head latent attention): each layer's KVCache holds, as "keys", the normalised latent
    # (B, 1, L, kv_lora_rank) and, as "values", the rope key (B, 1, L, qk_rope_head_dim), one "head"
    # shared by all query heads; not heads x head_dim. Layer 0 is dense, layer 1 MoE.
    "deepseek_v3": {
        "model_type": "deepseek_v3",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "rms_norm_eps": 1e-6,
        **_MLA,
    },
    "glm4_moe_lite": {
        "model_type": "glm4_moe_lite",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        **_MLA,
    },
}

# The mlx-lm cache classes in each family's make_prompt_cache(model), top level only (falcon_h1's
# CacheList holds an ArraysCache and a KVCache).
CACHE_KINDS: dict[str, set[str]] = {
    "llama": {"KVCache"},
    "smollm3": {"KVCache"},
    "mistral": {"KVCache", "RotatingKVCache"},
    "ministral3": {"KVCache", "RotatingKVCache"},
    "mistral3": {"KVCache"},
    "qwen3": {"KVCache"},
    "qwen3_moe": {"KVCache"},
    "gemma3_text": {"KVCache", "RotatingKVCache"},
    "gemma3": {"KVCache", "RotatingKVCache"},
    "gemma4_text": {"KVCache", "RotatingKVCache"},
    "gemma4": {"KVCache", "RotatingKVCache"},
    "gpt_oss": {"KVCache", "RotatingKVCache"},
    "cohere2": {"KVCache", "RotatingKVCache"},
    "olmo3": {"KVCache", "RotatingKVCache"},
    "qwen3_next": {"ArraysCache", "KVCache"},
    "qwen3_5": {"ArraysCache", "KVCache"},
    "lfm2": {"ArraysCache", "KVCache"},
    "mamba2": {"ArraysCache"},
    "falcon_h1": {"CacheList"},
    "nemotron_h": {"ArraysCache", "KVCache"},
    "granitemoehybrid": {"ArraysCache", "KVCache"},
    # MLA: a plain KVCache, but of latents (kv_lora_rank wide) and rope keys (see FAMILIES).
    "deepseek_v3": {"KVCache"},
    "glm4_moe_lite": {"KVCache"},
}
# Families with sliding-window layers (RotatingKVCache of WINDOW tokens); all of them also have
# global layers.
WINDOWED = {"mistral", "ministral3", "gemma3", "gemma3_text", "gemma4", "gemma4_text", "gpt_oss", "cohere2", "olmo3"}
# Families with recurrent state (ArraysCache): state-space, gated delta net or short-conv layers.
RECURRENT = {"qwen3_next", "qwen3_5", "lfm2", "mamba2", "falcon_h1", "nemotron_h", "granitemoehybrid"}
# Families whose attention caches a compressed latent instead of per-head keys and values.
LATENT = {"deepseek_v3", "glm4_moe_lite"}

# A mamba2 head (mamba2, falcon_h1, nemotron_h, granitemoehybrid) keeps exp(-exp(A_log) * dt) of
# its state per token, a gated delta net head (qwen3_next, qwen3_5) exp(-exp(A_log) * softplus(a +
# dt_bias)). Their init (A_log = log 1..heads, log U(0, 16)) forgets within a few tokens; at
# A_log = -8 a token keeps exp(-3.4e-4 * dt), over 0.99 for dt < 30, so 120 tokens on the state
# still holds the prompt's first token.
SLOW_DECAY_A_LOG = -8.0
# lfm2 normalises queries and keys (RMSNorm, weight 1): its attention over 120 tokens is near
# uniform, each token a 1/120 share. Norm weights of 4 sharpen it (scores x16), so its attention
# layers (its short convolutions cannot) remember a prompt's first token.
QK_NORM_SCALE = 4.0


def _adjust_weights(model) -> None:
    """Family-specific fixes to the random init, in place, before saving."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    updates = {}
    for name, value in tree_flatten(model.parameters()):
        if name.endswith(("q_layernorm.weight", "k_layernorm.weight")):
            updates[name] = value * QK_NORM_SCALE
        elif name.endswith("A_log"):
            updates[name] = mx.full(value.shape, SLOW_DECAY_A_LOG, dtype=value.dtype)
        elif name.endswith(".gate.weight") and not mx.any(value).item():
            # The MoE routers of deepseek_v3, glm4_moe_lite and nemotron_h start at zero: every
            # token would go to the same experts.
            updates[name] = mx.random.normal(value.shape) * value.shape[-1] ** -0.5
    model.load_weights(list(updates.items()), strict=False)


def build_family_model(path: Path, family: str, seed: int = 0, context_length: int = 4096) -> Path:
    """Write an MLX model folder of `family` (a FAMILIES key) that mlx_lm.load opens; returns it."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import MODEL_REMAPPING, _get_classes

    path = Path(path)
    config = copy.deepcopy(FAMILIES[family])  # the wrappers' ModelArgs write into text_config
    model_type = config["model_type"]
    if "text_config" in config:
        # build_tiny_model sets these at the top level; mistral3 hands text_config on as it is.
        vocab_size = build_tokenizer().get_vocab_size()
        config["text_config"].update(vocab_size=vocab_size, max_position_embeddings=context_length)
    # build_tiny_model writes the tokenizer, config and ChatML template; it imports the module
    # named by model_type, so a remapped type (mistral -> llama) goes in under its module's name.
    module = MODEL_REMAPPING.get(model_type, model_type)
    build_tiny_model(path, seed, context_length, config=dict(config, model_type=module), chat_template=CHATML_TEMPLATE)
    config_file = path / "config.json"
    config = dict(json.loads(config_file.read_text()), model_type=model_type)
    config_file.write_text(json.dumps(config, indent=2))

    # Its weights are the default init with projections x4 (non-degenerate greedy decoding);
    # loaded into the real class of this model_type, adjusted, saved over.
    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    model.load_weights(str(path / "model.safetensors"))
    mx.random.seed(seed)
    _adjust_weights(model)
    weights = {k: v.astype(mx.float32) for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    return path


_BUILT: dict[str, Path] = {}


def family_model_path(tmp_path_factory, family: str) -> Path:
    """The folder of `family`'s tiny model, built once per test session."""
    if family not in _BUILT:
        _BUILT[family] = build_family_model(tmp_path_factory.mktemp(f"tiny-{family}"), family)
    return _BUILT[family]
