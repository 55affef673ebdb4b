"""What an empty chat shows: the current model, example prompts that send on click, and
the main shortcuts."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.gui.shortcuts import WELCOME, key_text

EXAMPLE_PROMPTS = (
    "Explain how a rainbow forms.",
    "Write a short poem about a cup of tea.",
    "Give me five ideas for a rainy Sunday.",
    "How is a list different from a tuple in Python?",
)


class Welcome(QWidget):
    promptChosen = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("welcome")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 24, 12, 12)
        layout.setSpacing(10)
        heading = QLabel("Start a conversation")
        heading.setObjectName("welcomeHeading")
        heading.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(heading)
        self.model_label = QLabel()
        self.model_label.setObjectName("welcomeModel")
        self.model_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.model_label.setWordWrap(True)
        layout.addWidget(self.model_label)
        hint = QLabel("Type below, or try one of these:")
        hint.setObjectName("welcomeHint")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        layout.addWidget(hint)
        grid = QGridLayout()
        grid.setSpacing(8)
        self.prompt_buttons = []
        for i, text in enumerate(EXAMPLE_PROMPTS):
            button = QPushButton(text)
            button.setObjectName("examplePrompt")
            button.setToolTip("Send this message")
            button.setFocusPolicy(Qt.FocusPolicy.TabFocus)  # a click must not take focus from the composer
            button.clicked.connect(lambda _c=False, t=text: self.promptChosen.emit(t))
            grid.addWidget(button, i // 2, i % 2)
            self.prompt_buttons.append(button)
        layout.addLayout(grid)
        keys = QLabel("  ·  ".join(f"{key_text(key)}: {what.split(' (')[0].lower()}" for what, key in WELCOME))
        keys.setObjectName("welcomeShortcuts")
        keys.setAlignment(Qt.AlignmentFlag.AlignCenter)
        keys.setWordWrap(True)
        layout.addWidget(keys)
        self.set_model("")

    def set_model(self, name: str, loading: bool = False, server_url: str = ""):
        if name and server_url and not loading:  # a model served elsewhere (engine/remote/backend.py)
            self.model_label.setText(f"You are chatting with {name}, served by {server_url}.")
        elif not name:
            self.model_label.setText("No model is loaded yet.")
        elif loading:
            self.model_label.setText(f"Loading {name}… you can type now; your message is sent when it is ready.")
        else:
            self.model_label.setText(f"You are chatting with {name}, running on this computer.")
