"""Scripted model output: a logits processor that forces given token ids, then lets the model go on.

A tiny random model cannot be trained to call a tool offline; forcing its tokens runs the real
engine (prefill, cache, detokenizer, tool parser) on a reply we choose.
"""

import mlx.core as mx

# The tool the scripted calls call (OpenAI function format), for tests and the tools figure.
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}},
    },
}


class Script:
    """Forces `ids` as the first tokens of a reply (one call per sampled token), then does nothing."""

    def __init__(self, ids):
        self.ids = list(ids)
        self.step = 0

    def __call__(self, tokens, logits):
        if self.step >= len(self.ids):
            return logits
        forced = self.ids[self.step]
        self.step += 1
        mask = mx.full(logits.shape, -1e9, dtype=logits.dtype)
        return mask.at[..., forced].add(1e9 + 1.0)


def tool_call_ids(tokenizer, name: str, arguments: str) -> list:
    """The ids of a Hermes-style tool call and the end of the turn."""
    text = f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
    return list(tokenizer.encode(text, add_special_tokens=False)) + [tokenizer.eos_token_id]


class Repeat(Script):
    """Forces `ids` (ending with end-of-turn) in every turn: a model that calls the same tool each time."""

    def __init__(self, ids):
        # The engine samples one token past the end of a turn (decoding is pipelined) and drops it.
        super().__init__([*ids, ids[-1]])

    def __call__(self, tokens, logits):
        if self.step >= len(self.ids):
            self.step = 0
        return super().__call__(tokens, logits)
