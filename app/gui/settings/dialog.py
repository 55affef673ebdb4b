"""The settings dialog: shows and edits one settings dict (a chat's, or Preferences' defaults).

The model behind it (defaults, overrides, effective values, the engine's parameters) is
app/core/settings.py; this file holds only the widgets and their UI text.
"""

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.core.settings import PREFILL_KEY, SPECS, load_presets, setting_value
from app.gui.shortcuts import is_alt_command
from engine.errors import ChinwagError
from engine.types import ParamSpec, speculative_default

# How the dialog shows a field's lowest value ("off"), and its step; UI only.
SPECIAL_TEXT = {"top_k": "off", "seed": "random", "context_cap": "model's limit"}
STEPS = {"min_p": 0.01}
# The dialog's tooltips: what each knob does, for someone who has never heard of it (UI text;
# a key without one shows GenerationParams' own help).
TIPS = {
    "system_prompt": "Instructions the model reads before the conversation (Enter: OK, Shift+Enter: new line).",
    "temperature": "Randomness. 0 always picks the likeliest word; 0.7 is balanced; above 1 gets creative "
    "and less reliable.",
    "top_p": "Nucleus sampling: pick only among the likeliest words whose probabilities add up to this. "
    "1 turns it off; 0.9 trims unlikely words.",
    "top_k": "Pick only among this many likeliest words. Off: no limit.",
    "min_p": "Drop words less likely than this fraction of the likeliest one. 0 turns it off; 0.05 is a good start.",
    "repetition_penalty": "Above 1 discourages repeating words already written (1.1 is mild); 1 turns it off.",
    "max_tokens": "The longest reply, in tokens (a token is about three quarters of a word).",
    "seed": "The same seed and settings give the same reply again. Random: a new one each time.",
    "context_cap": "Use at most this many tokens of context (less memory, older turns dropped sooner). "
    "Model's limit: the model's own.",
}


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


class PromptEdit(QPlainTextEdit):
    """A dialog's multi-line field: Tab moves on, Enter is OK, Shift+Enter starts a new line."""

    submitted = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setTabChangesFocus(True)

    def keyPressEvent(self, event):
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & (Qt.KeyboardModifier.ShiftModifier | Qt.KeyboardModifier.AltModifier):
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            return
        if is_alt_command(event):
            event.ignore()  # Alt+O is not an "o" in the prompt
            return
        super().keyPressEvent(event)


class WheelToScroll(QObject):
    """An event filter: a wheel over a field without the keyboard focus goes to `bar` instead."""

    def __init__(self, bar: QWidget, parent: QObject) -> None:
        super().__init__(parent)
        self.bar = bar

    def eventFilter(self, watched, event):
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget) and not watched.hasFocus():
            QApplication.sendEvent(self.bar, event)
            return True
        return False


class FormScroll(QScrollArea):
    """The dialog's rows, scrolled only when the screen is too short for them (a big font size):
    its size hint is the rows' whole size, not QScrollArea's cap of 24 lines."""

    def __init__(self, body: QWidget, parent=None):
        super().__init__(parent)
        self.body = body
        self.setWidget(body)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # its fields take the keyboard, not the frame around them
        self._guard = WheelToScroll(self.verticalScrollBar(), self)

    def guard_wheel(self):
        """The wheel scrolls the rows, never a field it passes over (seen on X: a scroll through
        Preferences set the temperature to 0.00); a field with the keyboard focus still takes it."""
        for field in [*self.body.findChildren(QAbstractSpinBox), *self.body.findChildren(QComboBox)]:
            field.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
            field.installEventFilter(self._guard)

    def sizeHint(self) -> QSize:
        rows = self.body.sizeHint()
        return QSize(rows.width() + self.verticalScrollBar().sizeHint().width(), rows.height())


def _with_note(box: QCheckBox, note: str) -> QWidget:
    """A checkbox with what it does in a line below, which wraps (a checkbox's own text cannot)."""
    holder = QWidget()
    column = QVBoxLayout(holder)
    column.setContentsMargins(0, 0, 0, 0)
    column.setSpacing(0)
    column.addWidget(box)
    label = QLabel(note)
    label.setWordWrap(True)
    label.setObjectName("settingNote")
    label.setEnabled(False)  # drawn as secondary text, in every theme
    label.setIndent(box.style().pixelMetric(box.style().PixelMetric.PM_IndicatorWidth) + 6)
    column.addWidget(label)
    return holder


class SettingsDialog(QDialog):
    """Edits one settings dict. Show it with open() (never exec() from a coroutine)."""

    def __init__(self, values: dict, defaults: dict, title: str, parent=None, note: str = ""):
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle(title)
        self.setWindowModality(Qt.WindowModality.WindowModal)
        self._defaults = dict(defaults)
        layout = QVBoxLayout(self)
        body = QWidget()
        rows = QVBoxLayout(body)
        rows.setContentsMargins(0, 0, 0, 0)
        if note:
            label = QLabel(note)
            label.setWordWrap(True)
            rows.addWidget(label)
        self.extra_group = QGroupBox()  # rows a subclass adds above the chat settings
        self.extra_form = QFormLayout(self.extra_group)
        self.extra_group.setVisible(False)
        rows.addWidget(self.extra_group)
        self.chat_group = QGroupBox()
        rows.addWidget(self.chat_group)
        self.rows_scroll = FormScroll(body)
        layout.addWidget(self.rows_scroll)
        form = QFormLayout()
        self.presets = load_presets()
        self.preset_box = QComboBox()
        self.preset_box.setObjectName("promptPreset")
        self.preset_box.addItem("Choose a preset…")
        for preset in self.presets:
            self.preset_box.addItem(preset["name"], preset["prompt"])
        self.preset_box.setToolTip("Fill the system prompt with a ready-made one (you can edit it after)")
        self.preset_box.activated.connect(self._use_preset)
        self.system_prompt = PromptEdit()
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setPlaceholderText("Optional instructions sent before the conversation")
        self.system_prompt.setMinimumHeight(80)
        self.system_prompt.setToolTip(TIPS["system_prompt"])
        self.system_prompt.submitted.connect(self.accept)
        self.fields = {name: _box(spec) for name, spec in SPECS.items()}
        form.addRow("Preset", self.preset_box)
        form.addRow("System prompt", self.system_prompt)
        for key, box in self.fields.items():
            box.setObjectName(key)
            box.setToolTip(TIPS.get(key, SPECS[key].help))
            form.addRow(key.replace("_", " ").capitalize(), box)
            form.labelForField(box).setToolTip(box.toolTip())
        self.prefill_box = QCheckBox("Read the message while I type")
        self.prefill_box.setObjectName(PREFILL_KEY)
        self.prefill_box.setToolTip(
            "The model starts reading your message when you pause typing, so the reply starts sooner after Enter"
        )
        form.addRow("", _with_note(self.prefill_box, "Faster replies to long messages."))
        self.speculative = QCheckBox("Speculative decoding")
        self.speculative.setObjectName("speculative")
        self.speculative.setToolTip(
            "Drafts tokens from the conversation and checks them in one pass; the reply is the same as without it"
        )
        form.addRow(
            "",
            _with_note(
                self.speculative, "Faster replies when they repeat the conversation; the reply itself does not change."
            ),
        )
        self.draft_model = QLineEdit()
        self.draft_model.setObjectName("draft_model")
        self.draft_model.setPlaceholderText("none: drafts come from the conversation")
        self.draft_model.setToolTip(
            "A smaller model with the same tokenizer (a model id from the Model menu, "
            "or a folder) that drafts tokens for speculative decoding"
        )
        form.addRow("Draft model", self.draft_model)
        self.chat_group.setLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        for which, text in (
            (QDialogButtonBox.StandardButton.Ok, "&OK"),
            (QDialogButtonBox.StandardButton.Cancel, "&Cancel"),
        ):
            buttons.button(which).setText(text)  # Alt+O, Alt+C (Qt shows no mnemonics on macOS)
        self.reset_button = QPushButton("&Reset to Defaults")
        buttons.addButton(self.reset_button, QDialogButtonBox.ButtonRole.ResetRole)
        self.reset_button.clicked.connect(lambda: self.set_values(self._defaults))
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok_button.setDefault(True)  # Return in a field is OK
        self.set_values(values)

    def showEvent(self, event):
        """As tall as its rows, but never taller than the screen: OK and Cancel stay on it and the
        rows scroll instead; always as wide as the rows (Qt would start it at 2/3 of the screen)."""
        super().showEvent(event)
        self.first_field().setFocus()  # typing starts in the first row, Tab goes down the rows
        rows = self.rows_scroll
        rows.guard_wheel()  # here: a subclass adds its rows after this class's __init__
        rows.setMinimumWidth(rows.body.minimumSizeHint().width() + rows.verticalScrollBar().sizeHint().width())
        screen = self.screen().availableGeometry()
        # The title bar (not known before the window manager has framed the dialog: two lines).
        frame = max(self.frameGeometry().height() - self.height(), 2 * self.fontMetrics().height())
        room = screen.height() - frame
        want = self.sizeHint()
        height = min(want.height(), room)
        if height != self.height() or self.width() < want.width():
            self.resize(max(self.width(), want.width()), height)
        if self.frameGeometry().bottom() > screen.bottom():
            self.move(self.x(), screen.top())

    def first_field(self) -> QWidget:
        return self.preset_box

    def _use_preset(self, index):
        if index > 0:
            self.system_prompt.setPlainText(self.preset_box.itemData(index) or "")
            self.preset_box.setCurrentIndex(0)
            self.system_prompt.setFocus()

    def set_values(self, values: dict):
        self.system_prompt.setPlainText(str(values.get("system_prompt") or ""))
        for key, box in self.fields.items():
            spec = SPECS[key]
            try:
                value = setting_value(spec, {key: values.get(key, self._defaults.get(key, spec.default))})
            except ChinwagError:  # a bad stored value shows the built-in default, to be saved over
                value = spec.default
            value = box.minimum() if value is None else value
            if isinstance(box, QDoubleSpinBox):
                box.setValue(float(value))
            else:
                box.setValue(int(value))
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
