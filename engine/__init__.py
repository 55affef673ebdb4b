"""Chinwag's engine: models, per-conversation KV caches, and one MLX thread.

Importing this package is cheap: MLX and mlx-lm are imported on the engine thread.
"""

from typing import TYPE_CHECKING

from engine.descriptors import keep_descriptor_limits
from engine.errors import ChinwagError, ContextOverflowError, DoesNotFitError, ModelError
from engine.types import (
    BackgroundPrefill,
    ChatMessage,
    EngineState,
    EngineStatus,
    FinishReason,
    ForkedCache,
    GenerationParams,
    LoadProgress,
    MemoryReport,
    ModelInfo,
    ModelStatus,
    PrefillProgress,
    Role,
    TextDelta,
    ToolCall,
    TurnAnnounced,
    TurnOrigin,
    TurnStats,
)

# Before any mlx-lm import: its setrlimit call raises under a hard descriptor limit below 4,096.
keep_descriptor_limits()

if TYPE_CHECKING:  # mypy sees the class; importing engine stays cheap
    from engine.api import Engine

__all__ = [
    "DoesNotFitError",
    "ChatMessage",
    "Role",
    "ToolCall",
    "ChinwagError",
    "ContextOverflowError",
    "ModelError",
    "EngineState",
    "EngineStatus",
    "FinishReason",
    "GenerationParams",
    "LoadProgress",
    "MemoryReport",
    "ModelInfo",
    "ModelStatus",
    "PrefillProgress",
    "BackgroundPrefill",
    "ForkedCache",
    "TextDelta",
    "TurnStats",
    "TurnAnnounced",
    "TurnOrigin",
    "Engine",
]


def __getattr__(name: str) -> type:
    if name == "Engine":
        from engine.api import Engine

        return Engine
    raise AttributeError(name)
