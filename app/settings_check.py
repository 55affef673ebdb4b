"""What a conversation's stored settings may hold: each key's type and range.

An imported JSON export is refused if a setting is wrong (`settings_problems`); settings read
from the store are filtered (`valid_settings`), so a bad value written by an older Chinwag
falls back to the default instead of breaking every send. No Qt.
"""

import math

# key: (kind, lowest, highest). The dialog's spin boxes stay inside these ranges.
RANGES = {
    "temperature": (float, 0.0, 5.0),
    "top_p": (float, 0.0, 1.0),
    "top_k": (int, 0, 1_000_000),
    "min_p": (float, 0.0, 1.0),
    "repetition_penalty": (float, 0.01, 10.0),
    "max_tokens": (int, 1, 1 << 20),
    "context_cap": (int, 0, 1 << 24),
}
TEXT_KEYS = ("system_prompt",)


def _problem(key, value):
    if key in TEXT_KEYS:
        return None if isinstance(value, str) else "is not text"
    if key not in RANGES or value is None:
        return None  # unknown keys are kept and ignored; None means "the default"
    kind, low, high = RANGES[key]
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or (kind is int and not float(value).is_integer()) or not math.isfinite(value):
        return f"is not {'a whole number' if kind is int else 'a number'}"
    if not low <= value <= high:
        return f"is outside {low}..{high}"
    return None


def settings_problems(settings) -> list:
    """What is wrong with a settings object, one phrase per bad key ([] if nothing)."""
    if not isinstance(settings, dict):
        return ["settings is not an object"]
    out = []
    for key, value in settings.items():
        problem = _problem(key, value)
        if problem:
            out.append(f"settings.{key} {value!r:.40} {problem}")
    return out


def valid_settings(settings) -> dict:
    """The keys of settings whose values are usable; the rest fall back to the defaults."""
    if not isinstance(settings, dict):
        return {}
    return {k: v for k, v in settings.items() if _problem(k, v) is None}
