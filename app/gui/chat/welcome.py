"""What an empty chat shows: the current model, example prompts that send on click, and
the main shortcuts. It reflows to the column's width: the prompts in one column when two do
not fit, the shortcuts on as many lines as they need, never cut inside one."""

from PySide6.QtCore import QEvent, Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QApplication, QGridLayout, QLabel, QPushButton, QSizePolicy, QVBoxLayout, QWidget

from app.gui.shortcuts import WELCOME, key_text

EXAMPLE_PROMPTS = (
    "Explain how a rainbow forms.",
    "Write a short poem about a cup of tea.",
    "Give me five ideas for a rainy Sunday.",
    "How is a list different from a tuple in Python?",
)
HEADING_SCALE = 1.6  # the heading, relative to the window's font size (Preferences)
SEPARATOR = "  ·  "


def pack_lines(items: list[str], width: int, advance, separator: str = SEPARATOR) -> list[str]:
    """Items joined by separator into lines no wider than width (advance: a text's width);
    a line never ends or starts with a separator; an item is cut (between its words) only when
    it is wider than a line alone."""
    lines: list[str] = []
    for item in items:
        if separator != " " and " " in item and advance(item) > width:  # too wide alone: its words wrap
            lines.extend(pack_lines(item.split(" "), width, advance, " "))
            continue
        joined = lines[-1] + separator + item if lines else item
        if lines and advance(joined) <= width:
            lines[-1] = joined
        else:
            lines.append(item)
    return lines


class ShortcutLine(QLabel):
    """The shortcuts as whole items, on as many centred lines as the width needs."""

    def __init__(self, items: list[str], parent=None):
        super().__init__(parent)
        self.items = items
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(40)
        self._pack()

    def lines(self) -> list[str]:
        return self.text().split("\n")

    def _pack(self):
        metrics = self.fontMetrics()
        text = "\n".join(pack_lines(self.items, max(self.width(), 40), metrics.horizontalAdvance))
        if text != self.text():
            self.setText(text)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._pack()

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() == QEvent.Type.FontChange:
            self._pack()


class Welcome(QWidget):
    promptChosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("welcome")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 24, 12, 12)
        layout.setSpacing(10)
        self.heading = QLabel("Start a conversation")
        self.heading.setObjectName("welcomeHeading")
        self.heading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.heading.setWordWrap(True)
        self._scale_heading()
        layout.addWidget(self.heading)
        self.model_label = QLabel()
        self.model_label.setObjectName("welcomeModel")
        self.model_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.model_label.setWordWrap(True)
        layout.addWidget(self.model_label)
        hint = QLabel("Type below, or try one of these:")
        hint.setObjectName("welcomeHint")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setWordWrap(True)
        layout.addWidget(hint)
        self.grid = QGridLayout()
        self.grid.setSpacing(8)
        self.prompt_buttons = []
        for text in EXAMPLE_PROMPTS:
            button = QPushButton(text)
            button.setObjectName("examplePrompt")
            button.setToolTip("Send this message")
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click must not take focus from the composer
            # The grid decides the width (one column or two): a prompt's text never widens the chat.
            button.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Fixed)
            button.clicked.connect(lambda _c=False, t=text: self.promptChosen.emit(t))
            button.installEventFilter(self)
            self.prompt_buttons.append(button)
        self.columns = 0
        self._place_prompts(2)
        layout.addLayout(self.grid)
        self.keys = ShortcutLine([f"{key_text(key)}: {what.split(' (')[0].lower()}" for what, key in WELCOME])
        self.keys.setObjectName("welcomeShortcuts")
        layout.addWidget(self.keys)
        self.set_model("")

    def _place_prompts(self, columns: int):
        if columns == self.columns:
            return
        self.columns = columns
        for button in self.prompt_buttons:
            self.grid.removeWidget(button)
        for i, button in enumerate(self.prompt_buttons):
            self.grid.addWidget(button, i // columns, i % columns)

    def _reflow(self):
        """Two columns of prompts if they fit, else one; a prompt wider than its column wraps."""
        layout = self.layout()
        assert layout is not None  # the column made in __init__
        margins = layout.contentsMargins()
        room = self.width() - margins.left() - margins.right()
        sample = self.prompt_buttons[0]
        metrics = sample.fontMetrics()
        lines = sample.text().split("\n")
        pad = sample.sizeHint().width() - max(metrics.horizontalAdvance(line) for line in lines)  # its frame
        natural = max(metrics.horizontalAdvance(text) for text in EXAMPLE_PROMPTS) + pad
        spacing = self.grid.horizontalSpacing()
        self._place_prompts(2 if 2 * natural + spacing <= room else 1)
        column = (room - spacing * (self.columns - 1)) // self.columns - pad
        for button, text in zip(self.prompt_buttons, EXAMPLE_PROMPTS):
            wrapped = "\n".join(pack_lines(text.split(" "), column, metrics.horizontalAdvance, " "))
            if wrapped != button.text():
                button.setText(wrapped)

    def resizeEvent(self, event):
        super().resizeEvent(event)
        self._reflow()

    def eventFilter(self, obj, event):
        # A prompt's size is known once the style sheet has polished it (or the font changed).
        if event.type() in (QEvent.Type.Polish, QEvent.Type.StyleChange, QEvent.Type.FontChange):
            self._reflow()
        return False

    def _scale_heading(self):
        font = QFont(QApplication.font())
        if font.pointSizeF() > 0:
            font.setPointSizeF(font.pointSizeF() * HEADING_SCALE)
        else:  # a font sized in pixels
            font.setPixelSize(round(font.pixelSize() * HEADING_SCALE))
        font.setBold(True)
        self.heading.setFont(font)

    def changeEvent(self, event):
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.ApplicationFontChange):
            self._scale_heading()  # the heading follows Preferences' font size

    def set_model(self, name: str, loading: bool = False, server_url: str = ""):
        if name and server_url and not loading:  # a model served elsewhere (engine/remote/backend.py)
            self.model_label.setText(f"You are chatting with {name}, served by {server_url}.")
        elif not name:
            self.model_label.setText("No model is loaded yet.")
        elif loading:
            self.model_label.setText(f"Loading {name}… you can type now; your message is sent when it is ready.")
        else:
            self.model_label.setText(f"You are chatting with {name}, running on this computer.")
