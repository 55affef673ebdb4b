"""What a conversation's stored settings may hold: each key's type and range.

An imported JSON export is refused if a setting is wrong (`settings_problems`); settings read
from the store are filtered (`valid_settings`), so a bad value written by an older Chinwag
falls back to the default instead of breaking every send. No Qt.
"""

from engine.errors import ChinwagError
from engine.types import param_specs

# Each key's type and range come from GenerationParams, the one source (engine/types.py).
SPECS = {spec.name: spec for spec in param_specs()}
TEXT_KEYS = ("system_prompt", "draft_model")
BOOL_KEYS = ("speculative",)


def _problem(key, value):
    if key in TEXT_KEYS:
        return None if isinstance(value, str) else "is not text"
    if key in BOOL_KEYS:
        return None if value is None or isinstance(value, bool) else "is not true or false"
    spec = SPECS.get(key)
    if spec is None or value is None:
        return None  # unknown keys are kept and ignored; None means "the default"
    if spec.optional and value == 0 and spec.lo > 0 and not isinstance(value, bool):
        return None  # older settings wrote 0 for "off"
    try:
        spec.convert(value)
    except ChinwagError as e:
        text = str(e)  # "<key> must be …, got …"
        return text[len(key) + 1 :] if text.startswith(f"{key} ") else text
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
