"""The small dataclasses that cross from the engine thread to front ends.

Only ints, floats, strings and tuples live here: never an MLX array.
"""

from dataclasses import dataclass
from typing import Optional

DEFAULT_MAX_TOKENS = 512


@dataclass(frozen=True)
class GenerationParams:
    temperature: float = 0.7
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: Optional[int] = None
    # A cap below the model's own context length; None uses the model's.
    context_cap: Optional[int] = None


@dataclass(frozen=True)
class TextDelta:
    """New text of the reply, and the token ids it came from."""

    text: str
    token_ids: tuple = ()


@dataclass(frozen=True)
class TurnStats:
    """The final event of every chat turn."""

    prompt_tokens: int
    reused_tokens: int
    prefilled_tokens: int
    generated_tokens: int
    ttft_s: float
    decode_tps: float
    prefill_tps: float
    kv_capacity: int
    kv_offset: int
    kv_bytes: int
    context_limit: int
    # "stop" (EOS), "length" (max tokens), "context" (hit the context limit),
    # "cancelled" (engine.stop), "error".
    finish_reason: str
    dropped_messages: int = 0
    prompt_ids: tuple = ()
    reply_ids: tuple = ()
    error: str = ""

    @property
    def note(self) -> str:
        if self.dropped_messages:
            return f"dropped {self.dropped_messages} oldest message(s) to fit the context"
        return ""


@dataclass(frozen=True)
class LoadProgress:
    """Progress of a model load, import or download: done out of total (0 = unknown)."""

    stage: str
    done: float = 0
    total: float = 0


@dataclass(frozen=True)
class ModelInfo:
    id: str
    name: str
    path: str
    architecture: str = ""
    size_bytes: int = 0
    quantization: str = ""
    context_length: int = 0
    # "ready", "needs-import" (GGUF / starter not yet imported), or "unusable".
    status: str = "ready"
    reason: str = ""
    source: str = ""  # "starter", "imported", "hf-cache", "folder"

    def to_json(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


@dataclass(frozen=True)
class MemoryReport:
    """What every conversation's KV cache holds, against the engine's memory budget."""

    budget_bytes: int
    kv_bytes: int
    conversations_in_memory: int
    tokens_held: int
    positions_reserved: int
    evictions: int
    restores: int
    save_seconds: float
    restore_seconds: float


@dataclass(frozen=True)
class EngineState:
    """What the status bar shows."""

    state: str  # "idle", "loading", "ready", "generating"
    model: Optional[ModelInfo] = None
    detail: str = ""
    kv_bytes_total: int = 0


@dataclass(frozen=True)
class HubModel:
    """One Hugging Face Hub search result (engine.download.search_models)."""

    repo: str
    downloads: int = 0
    likes: int = 0
