"""Chinwag's engine: models, per-conversation KV caches, and one MLX thread.

Importing this package is cheap: MLX and mlx-lm are imported on the engine thread.
"""

from engine.errors import ChinwagError, ContextOverflowError, ModelError
from engine.types import (
    BackgroundPrefill,
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
    TextDelta,
    TurnStats,
)

__all__ = [
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
    "Engine",
]


def __getattr__(name):
    if name == "Engine":
        from engine.api import Engine

        return Engine
    raise AttributeError(name)
