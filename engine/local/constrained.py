"""A constrained reply's token mask on the engine thread: llguidance's matcher over the model's tokenizer.

The mask is applied to the logits before sampling (decoding.py's `TokenSampler`), so every token
sampled keeps the reply a prefix of valid JSON (or of one tool call); end of sequence is allowed
only once it is complete. The matcher reads only the tokens the reply emits: the cache is untouched.
"""

import json
import weakref
from typing import Any

import mlx.core as mx
import numpy as np

from engine.constraint import JSON_OPTIONS, UnsupportedSchema, grammar, json_grammar, tool_call_schema
from engine.types import GenerationParams, OutputKind

# mlx-lm's parsers whose calls are the JSON {"name", "arguments"} between the start and end markers.
JSON_TOOL_PARSERS = ("mlx_lm.tool_parsers.json_tools",)

_BRIDGES: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def bridge(tokenizer: Any) -> Any:
    """llguidance's view of an mlx-lm tokenizer (its Hugging Face fast tokenizer, every end-of-sequence
    id), made once per loaded tokenizer: it takes about half a second."""
    found = _BRIDGES.get(tokenizer)
    if found is None:
        import llguidance.hf

        found = llguidance.hf.from_tokenizer(tokenizer._tokenizer, eos_token=sorted(tokenizer.eos_token_ids))
        _BRIDGES[tokenizer] = found
    return found


def _marker(tokenizer: Any, text: str) -> str:
    """A tool-call marker in Lark: its special token if it is one (special tokens never match text), else its text."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    special = set(getattr(tokenizer._tokenizer, "all_special_ids", ())) | set(
        getattr(tokenizer._tokenizer, "added_tokens_decoder", {})
    )
    if len(ids) == 1 and ids[0] in special:
        return f"<[{ids[0]}]>"
    return json.dumps(text, ensure_ascii=False)


def check_tool_format(tokenizer: Any) -> None:
    """UnsupportedSchema (a 400 on the server, before the turn) unless the model writes its tool
    calls as JSON between markers, the one format a call can be forced in."""
    parser = getattr(tokenizer, "tool_parser", None)
    module = getattr(parser, "__module__", "")
    if not getattr(tokenizer, "has_tool_calling", False) or not module:
        raise UnsupportedSchema("a tool call cannot be forced: this model's chat template writes no tool calls")
    if module not in JSON_TOOL_PARSERS:
        raise UnsupportedSchema(
            "a tool call can be forced only on a model that writes JSON tool calls "
            f'({{"name", "arguments"}} between markers); this one writes them in the {module.rsplit(".", 1)[-1]} format'
        )


def tool_call_grammar(tokenizer: Any, params: GenerationParams) -> str:
    """One tool call in the model's own format (only JSON calls between markers are supported)."""
    check_tool_format(tokenizer)
    assert params.response_format is not None
    schema = tool_call_schema(params.tools, params.response_format.tools)
    json_grammar(schema)  # the same check (and message) as a reply's schema
    call = json.dumps({**schema, "x-guidance": JSON_OPTIONS})
    start, end = _marker(tokenizer, tokenizer.tool_call_start), _marker(tokenizer, tokenizer.tool_call_end)
    return f'start: {start} "\\n" call "\\n" {end}\ncall: %json {call}\n'


class Constraint:
    """The matcher of one constrained reply: `mask` the logits, then `consume` the token sampled."""

    def __init__(self, tokenizer: Any, params: GenerationParams) -> None:
        import llguidance

        fmt = params.response_format
        assert fmt is not None
        text = tool_call_grammar(tokenizer, params) if fmt.kind == OutputKind.TOOL_CALL else grammar(fmt)
        self.matcher = llguidance.LLMatcher(bridge(tokenizer), text, log_level=0)
        if self.matcher.is_error():
            raise UnsupportedSchema(f"unsupported output format: {self.matcher.get_error()}")
        self.eos = sorted(tokenizer.eos_token_ids)
        self.bits = np.zeros((bridge(tokenizer).vocab_size + 31) // 32, dtype=np.int32)

    def allowed(self, width: int) -> np.ndarray:
        """Which of `width` token ids may come next (bools); only end of sequence once the reply is complete."""
        if self.matcher.is_stopped():
            allowed = np.zeros(width, dtype=bool)
            allowed[[t for t in self.eos if t < width]] = True
            return allowed
        self.matcher.unsafe_compute_mask_ptr(self.bits.ctypes.data, self.bits.nbytes)
        if self.matcher.is_error():
            raise RuntimeError(f"the grammar matcher failed: {self.matcher.get_error()}")
        bits = np.unpackbits(self.bits.view(np.uint8), bitorder="little")[:width].astype(bool)
        return bits if len(bits) == width else np.pad(bits, (0, width - len(bits)))  # rows past the tokenizer's: never

    def mask(self, logits: mx.array) -> mx.array:
        return mx.where(mx.array(self.allowed(logits.shape[-1])), logits, -mx.inf)

    def consume(self, token: int) -> None:
        if self.matcher.is_stopped():
            return
        if not self.matcher.consume_token(token):
            raise RuntimeError(f"the grammar matcher refused token {token}: {self.matcher.get_error()}")
