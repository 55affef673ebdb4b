"""Generation settings, the model behind Chat Settings and Preferences: no Qt.

Defaults come from GenerationParams (the sampling keys) and resources/default_settings.json
(the rest), overlaid by what the user saved in Preferences (store state "default_settings").
A conversation stores only the keys that differ from the defaults, so changing a default
reaches every chat that did not override it. None means "off" for optional keys (seed,
context cap).

What a conversation's stored settings may hold (each key's type and range) is checked here
too: an imported JSON export is refused if a setting is wrong (`settings_problems`); settings
read from the store are filtered (`valid_settings`), so a bad value written by an older
Chinwag falls back to the default instead of breaking every send.
"""

import json
from collections.abc import Sequence
from importlib import resources as importlib_resources
from typing import Any

from app.core.store import Message, MessageStatus, NotFoundError, Store
from engine.errors import ChinwagError
from engine.types import ChatMessage, GenerationParams, ParamSpec, Role, param_specs

DEFAULTS_KEY = "default_settings"
TOOL_ROLE = Role.TOOL  # a tool's result in the store (its call in Message.tool_result)
# Each key's type and range come from GenerationParams, the one source (engine/types.py).
SPECS = {spec.name: spec for spec in param_specs()}
# Read the message while it is typed (engine.prefill); its default is in default_settings.json.
PREFILL_KEY = "prefill_while_typing"
KEYS = ("system_prompt", PREFILL_KEY, *SPECS, "speculative", "draft_model")
TEXT_KEYS = ("system_prompt", "draft_model")
BOOL_KEYS = ("speculative",)
# The MCP servers switched off in this chat (names from mcp.json); not a generation setting, so not
# in KEYS: no default, and Chat Settings leaves it alone.
TOOLS_OFF_KEY = "tools_off"


# --- what stored settings may hold ---------------------------------------------
def _names_problem(value: object) -> str | None:
    return None if isinstance(value, list) and all(isinstance(v, str) for v in value) else "is not a list of names"


def _problem(key: str, value: object) -> str | None:
    if key == TOOLS_OFF_KEY:
        return _names_problem(value)
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


def settings_problems(settings: object) -> list[str]:
    """What is wrong with a settings object, one phrase per bad key ([] if nothing)."""
    if not isinstance(settings, dict):
        return ["settings is not an object"]
    out = []
    for key, value in settings.items():
        problem = _problem(key, value)
        if problem:
            out.append(f"settings.{key} {value!r:.40} {problem}")
    return out


def valid_settings(settings: object) -> dict[str, Any]:
    """The keys of settings whose values are usable; the rest fall back to the defaults."""
    if not isinstance(settings, dict):
        return {}
    return {k: v for k, v in settings.items() if _problem(k, v) is None}


def tools_off(store: Store, conv_id: str) -> set[str]:
    """The MCP servers switched off in a saved chat (none for an id the store does not hold)."""
    try:
        value = store.conversation_settings(conv_id).get(TOOLS_OFF_KEY)
    except NotFoundError:
        return set()
    return set(value) if isinstance(value, list) and _problem(TOOLS_OFF_KEY, value) is None else set()


def set_tools_off(store: Store, conv_id: str, servers: set[str]) -> None:
    """Save which servers are off in a saved chat (none: the key goes)."""
    store.update_settings(conv_id, {TOOLS_OFF_KEY: sorted(servers) or None})


# --- defaults, overrides, effective values -----------------------------------------
def builtin_defaults() -> dict[str, Any]:
    text = importlib_resources.files("resources").joinpath("default_settings.json").read_text("utf-8")
    # speculative None: the engine's per-backend default (on where the benchmark measured a gain).
    return {
        "speculative": None,
        "draft_model": "",
        **json.loads(text),
        **{name: spec.default for name, spec in SPECS.items()},
    }


def load_defaults(store: Store) -> dict[str, Any]:
    defaults = builtin_defaults()
    try:
        saved = store.get_state(DEFAULTS_KEY, {}) or {}
    except ChinwagError:  # the database cannot be read now: the built-in defaults still work
        saved = {}
    defaults.update({k: v for k, v in valid_settings(saved).items() if k in KEYS})
    return defaults


def effective(conv_settings: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    values = dict(defaults)
    values.update({k: v for k, v in valid_settings(conv_settings).items() if k in KEYS and v is not None})
    return values


def overrides(values: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """Keys to write with store.update_settings: changed values, None for back-to-default."""
    return {k: (None if values.get(k) == defaults.get(k) else values.get(k)) for k in KEYS}


def setting_value(spec: ParamSpec, values: dict[str, Any]) -> Any:
    """One sampling key's value from a settings dict (None: off), converted to its type."""
    value = values.get(spec.name, spec.default)
    if spec.optional and value == 0 and spec.lo > 0:  # older settings wrote 0 for "off"
        return None
    return spec.convert(value)


def params_from_settings(values: dict[str, Any]) -> GenerationParams:
    """The engine's parameters for effective settings; a value out of range is a ChinwagError."""
    try:
        numbers = {name: setting_value(spec, values) for name, spec in SPECS.items()}
    except ChinwagError as e:
        raise ChinwagError(f"chat settings: {e}") from e
    speculative = values.get("speculative")
    return GenerationParams(
        **numbers,
        speculative=None if speculative is None else bool(speculative),
        draft_model=str(values.get("draft_model") or "").strip(),
    )


def chat_messages(messages: Sequence[Message], system_prompt: str) -> list[ChatMessage]:
    """What the engine gets: the system prompt first, then the turns that have text, and tool rounds
    (a reply's calls, each `tool` result that answers one) as the terminal chat and the window store them."""
    out = [ChatMessage(Role.SYSTEM, system_prompt)] if system_prompt.strip() else []
    for m in messages:
        if m.role == Role.TOOL:
            if m.tool_result is not None and m.tool_result.tool_call_id:  # a tool's result, answering a call before it
                out.append(m.chat_message())
            continue
        if m.role not in (Role.USER, Role.ASSISTANT) or m.status == MessageStatus.FAILED:
            continue
        if m.role == Role.ASSISTANT and not m.content and not m.tool_calls:
            continue
        out.append(m.chat_message())  # a user message with its documents' blocks
    return out


def engine_messages(messages: Sequence[Message], system_prompt: str) -> list[dict[str, Any]]:
    """chat_messages in OpenAI's shape, as EngineAPI.chat takes them."""
    return [m.to_openai() for m in chat_messages(messages, system_prompt)]


def load_presets() -> list[dict[str, Any]]:
    """System prompt presets ({"name", "prompt"}) shipped in resources/prompt_presets.json."""
    text = importlib_resources.files("resources").joinpath("prompt_presets.json").read_text("utf-8")
    return [p for p in json.loads(text) if isinstance(p, dict) and "name" in p and "prompt" in p]
