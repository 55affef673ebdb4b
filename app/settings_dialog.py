"""Generation settings: per conversation (overrides) and Preferences (the defaults).

Defaults come from GenerationParams (the sampling keys) and resources/default_settings.json
(the rest), overlaid by what the user saved in Preferences (store state "default_settings").
A conversation stores only the keys that differ from the defaults, so changing a default
reaches every chat that did not override it. None means "off" for optional keys (seed,
context cap).
"""

import json
from importlib import resources as importlib_resources

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
)

from app.settings_check import valid_settings
from engine.errors import ChinwagError
from engine.types import GenerationParams, ParamSpec, param_specs, speculative_default

DEFAULTS_KEY = "default_settings"
SPECS = {spec.name: spec for spec in param_specs()}
# Read the message while it is typed (engine.prefill); its default is in default_settings.json.
PREFILL_KEY = "prefill_while_typing"
KEYS = ("system_prompt", PREFILL_KEY, *SPECS, "speculative", "draft_model")
# How the dialog shows a field's lowest value ("off"), and its step; UI only.
SPECIAL_TEXT = {"top_k": "off", "seed": "random", "context_cap": "model's limit"}
STEPS = {"min_p": 0.01}


def builtin_defaults() -> dict:
    text = importlib_resources.files("resources").joinpath("default_settings.json").read_text("utf-8")
    # speculative None: the engine's per-backend default (on where the benchmark measured a gain).
    return {"speculative": None, "draft_model": "", **json.loads(text),
            **{name: spec.default for name, spec in SPECS.items()}}


def load_defaults(store) -> dict:
    defaults = builtin_defaults()
    try:
        saved = store.get_state(DEFAULTS_KEY, {}) or {}
    except ChinwagError:  # the database cannot be read now: the built-in defaults still work
        saved = {}
    defaults.update({k: v for k, v in valid_settings(saved).items() if k in KEYS})
    return defaults


def effective(conv_settings: dict | None, defaults: dict) -> dict:
    values = dict(defaults)
    values.update({k: v for k, v in valid_settings(conv_settings).items() if k in KEYS and v is not None})
    return values


def overrides(values: dict, defaults: dict) -> dict:
    """Keys to write with store.update_settings: changed values, None for back-to-default."""
    return {k: (None if values.get(k) == defaults.get(k) else values.get(k)) for k in KEYS}


def _setting(spec: ParamSpec, values: dict):
    value = values.get(spec.name, spec.default)
    if spec.optional and value == 0 and spec.lo > 0:  # older settings wrote 0 for "off"
        return None
    return spec.convert(value)


def params_from_settings(values: dict) -> GenerationParams:
    """The engine's parameters for effective settings; a value out of range is a ChinwagError."""
    try:
        numbers = {name: _setting(spec, values) for name, spec in SPECS.items()}
    except ChinwagError as e:
        raise ChinwagError(f"chat settings: {e}") from e
    speculative = values.get("speculative")
    return GenerationParams(**numbers, speculative=None if speculative is None else bool(speculative),
                            draft_model=str(values.get("draft_model") or "").strip())


def engine_messages(messages, system_prompt: str) -> list[dict]:
    """What the engine gets: the system prompt first, then the turns that have text."""
    out = []
    if system_prompt.strip():
        out.append({"role": "system", "content": system_prompt})
    for m in messages:
        if m.role not in ("user", "assistant") or m.status == "failed" or (m.role == "assistant" and not m.content):
            continue
        out.append({"role": m.role, "content": m.content})
    return out


def _box(spec: ParamSpec) -> QSpinBox | QDoubleSpinBox:
    """A spin box over the field's range; an optional field's "off" sits one step below it."""
    box: QSpinBox | QDoubleSpinBox
    if spec.kind is float:
        box = QDoubleSpinBox()
        box.setDecimals(2)
        step = STEPS.get(spec.name, 0.05)
        box.setSingleStep(step)
        box.setRange(spec.lo - (step if spec.optional else 0), spec.hi)
    else:
        box = QSpinBox()
        box.setRange(int(spec.lo) - (1 if spec.optional else 0), int(spec.hi))
    special = SPECIAL_TEXT.get(spec.name, "default" if spec.optional else "")
    if special:
        box.setSpecialValueText(special)
    box.setToolTip(spec.help)
    return box


class SettingsDialog(QDialog):
    """Edits one settings dict. Show it with open() (never exec() from a coroutine)."""

    def __init__(self, values: dict, defaults: dict, title: str, parent=None, note: str = ""):
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle(title)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self._defaults = dict(defaults)
        layout = QVBoxLayout(self)
        if note:
            label = QLabel(note)
            label.setWordWrap(True)
            layout.addWidget(label)
        form = QFormLayout()
        self.system_prompt = QPlainTextEdit()
        self.system_prompt.setPlaceholderText("Optional instructions sent before the conversation")
        self.system_prompt.setMinimumHeight(80)
        self.fields = {name: _box(spec) for name, spec in SPECS.items()}
        form.addRow("System prompt", self.system_prompt)
        for key, box in self.fields.items():
            box.setObjectName(key)
            form.addRow(key.replace("_", " ").capitalize(), box)
        self.prefill_box = QCheckBox("Read the message while I type (faster replies to long messages)")
        self.prefill_box.setObjectName(PREFILL_KEY)
        form.addRow("", self.prefill_box)
        self.speculative = QCheckBox("Speculative decoding (faster replies that repeat the conversation)")
        self.speculative.setObjectName("speculative")
        self.speculative.setToolTip("Drafts tokens from the conversation and checks them in one pass; "
                                    "the reply is the same as without it")
        form.addRow("", self.speculative)
        self.draft_model = QLineEdit()
        self.draft_model.setObjectName("draft_model")
        self.draft_model.setPlaceholderText("none: drafts come from the conversation")
        self.draft_model.setToolTip("A smaller model with the same tokenizer (a model id from the Model menu, "
                                    "or a folder) that drafts tokens for speculative decoding")
        form.addRow("Draft model", self.draft_model)
        layout.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.reset_button = QPushButton("Reset to Defaults")
        buttons.addButton(self.reset_button, QDialogButtonBox.ButtonRole.ResetRole)
        self.reset_button.clicked.connect(lambda: self.set_values(self._defaults))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.set_values(values)

    def set_values(self, values: dict):
        self.system_prompt.setPlainText(str(values.get("system_prompt") or ""))
        for key, box in self.fields.items():
            spec = SPECS[key]
            try:
                value = _setting(spec, {key: values.get(key, self._defaults.get(key, spec.default))})
            except ChinwagError:  # a bad stored value shows the built-in default, to be saved over
                value = spec.default
            box.setValue(box.minimum() if value is None else value)
        self.prefill_box.setChecked(bool(values.get(PREFILL_KEY, self._defaults.get(PREFILL_KEY, True))))
        chosen = values.get("speculative", self._defaults.get("speculative"))
        self.speculative.setChecked(speculative_default() if chosen is None else bool(chosen))
        self.draft_model.setText(str(values.get("draft_model") or ""))

    def values(self) -> dict:
        out: dict = {"system_prompt": self.system_prompt.toPlainText()}
        for key, box in self.fields.items():
            value = box.value()
            if SPECS[key].optional and value == box.minimum():
                out[key] = None
            else:
                out[key] = round(value, 4) if isinstance(box, QDoubleSpinBox) else int(value)
        out[PREFILL_KEY] = self.prefill_box.isChecked()
        # The backend's default is stored as None, so it follows the default if that changes.
        checked = self.speculative.isChecked()
        out["speculative"] = None if checked == speculative_default() else checked
        out["draft_model"] = self.draft_model.text().strip()
        return out
