"""The window's settings that fit a model to this Mac (issue 32): the memory limit (Preferences,
app setting `memory_limit`: "6GB", "6144MB", "6GiB", "70%", or "" for what is available) and each
model's KV cache (app setting `kv_cache`: model id -> {"bits": 8 or 4, "group_size": 32, 64 or 128}).
The engine bridge gives them to `engine.configure` before every load; a refused value is one line."""

from typing import Any

from engine.errors import ChinwagError
from engine.types import DEFAULT_KV_GROUP_SIZE, KVQuantization

MEMORY_LIMIT_FIELD = "Preferences › Memory limit"
KV_CACHE_FIELD = "Preferences › KV cache"
SETTINGS = (KV_CACHE_FIELD, MEMORY_LIMIT_FIELD)  # where the window sets what a refusal advises changing
KV_CHOICES = ((0, "Full precision"), (8, "8-bit"), (4, "4-bit"))  # what the window offers; the CLI takes more
GROUP_CHOICES = (32, 64, 128)


def memory_limit(text: str) -> int | None:
    """Bytes, or None for what this machine has available; ChinwagError naming the field."""
    from engine.models.fit import parse_memory_limit

    return parse_memory_limit(text, MEMORY_LIMIT_FIELD) if text.strip() else None


def kv_setting(values: dict[str, Any], model_id: str) -> KVQuantization | None:
    """The model's KV cache setting, or None (full precision); ChinwagError for a refused one."""
    entry = (values.get("kv_cache") or {}).get(model_id)
    if not isinstance(entry, dict) or not entry.get("bits"):
        return None
    try:
        return KVQuantization(entry["bits"], entry.get("group_size", DEFAULT_KV_GROUP_SIZE))
    except ChinwagError as e:
        raise ChinwagError(f"{KV_CACHE_FIELD} of {model_id}: {e}") from None


def fit_options(values: dict[str, Any], model_id: str) -> tuple[KVQuantization | None, int | None]:
    """(KV quantization, memory limit) for loading `model_id` with these app settings."""
    return kv_setting(values, model_id), memory_limit(str(values.get("memory_limit", "")))
