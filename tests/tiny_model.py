"""The tiny-model fixture: a real mlx-lm llama with random weights and a real BPE tokenizer.

Built offline in a second or two, so most tests run on it instead of the starter model.
"""

import json
from pathlib import Path

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Qwen2.5's tool format (Hermes style): tools in the system turn, calls in <tool_call> tags,
# results in user turns as <tool_response>; mlx-lm reads it with its json_tools parser.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif %}"
    "# Tools\n\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools>\n\n"
    "For each function call, return a json object within <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{% elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'system' and loop.first %}"
    "{% elif message.role == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ message.content }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{% elif message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n{{ message.content }}"
    "{% for tool_call in message.tool_calls %}{% if tool_call.function is defined %}"
    "{% set tool_call = tool_call.function %}{% endif %}{{ '\\n' }}<tool_call>\n"
    '{"name": "{{ tool_call.name }}", "arguments": {{ tool_call.arguments | tojson }}}'
    "\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_CORPUS = """
The quick brown fox jumps over the lazy dog. A chat app keeps every conversation.
Hello, how are you today? I am fine, thank you. What is the capital of France?
The capital of France is Paris. Tell me a story about a cat and a long journey.
Numbers 0 1 2 3 4 5 6 7 8 9 and code: def f(x): return x * 2 # comment
Markdown has headings, lists, tables, links and `inline code` blocks.
"""

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "max_position_embeddings": 2048,
}


def build_tokenizer(vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    return tok


# A model whose mlx-lm cache is not a plain KVCache per layer: sliding-window layers
# use RotatingKVCache, which Chinwag cannot trim once it has wrapped.
GEMMA3_CONFIG = {
    "model_type": "gemma3_text",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    "sliding_window": 8,
    "sliding_window_pattern": 2,
    "rms_norm_eps": 1e-6,
}


def build_tiny_model(
    path: Path, seed: int = 0, context_length: int = 2048, config: dict = CONFIG, chat_template: str = CHATML_TEMPLATE
) -> Path:
    """Write an MLX model folder that mlx_lm.load opens; returns the folder."""
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = build_tokenizer()
    tok.save(str(path / "tokenizer.json"))
    config = dict(config, vocab_size=tok.get_vocab_size(), max_position_embeddings=context_length)
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": chat_template,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "model_max_length": context_length,
            },
            indent=2,
        )
    )
    mx.random.seed(seed)
    arch = importlib.import_module(f"mlx_lm.models.{config['model_type']}")
    model = arch.Model(arch.ModelArgs.from_dict(config))
    # Default-scale random weights make greedy decoding repeat one token forever;
    # larger projections make the output depend on position and context.
    weights = {k: (v * 4 if "proj" in k and k.endswith("weight") else v) for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(path / "model.safetensors"), weights)
    return path
