"""A pending tool call, shown inline in the reply (tool, server, arguments in full, three buttons), and a
tool's result as a collapsed block (tool, arguments, result, time, error). Results are plain text: an MCP
server's output is never rendered as HTML or Markdown."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QToolButton, QVBoxLayout

from app.tools.loop import ToolRun, pretty_arguments
from app.tools.policy import Answer
from app.tools.results import neutralise, shown_name


def _plain(text: str, name: str, lines: int = 8) -> QPlainTextEdit:
    view = QPlainTextEdit(neutralise(text))
    view.setObjectName(name)
    view.setReadOnly(True)
    view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
    shown = min(lines, text.count("\n") + 1)  # as tall as the text, up to `lines`; then it scrolls
    view.setFixedHeight(view.fontMetrics().lineSpacing() * shown + 14)
    return view


def _label(text: str, name: str) -> QLabel:
    label = QLabel(text)
    label.setObjectName(name)
    label.setTextFormat(Qt.TextFormat.PlainText)  # names come from the server: never rich text
    label.setWordWrap(True)
    return label


ANSWERED = {Answer.ONCE: "Allowed once", Answer.ALWAYS: "Always allowed", Answer.DENY: "Denied"}


class ApprovalCard(QFrame):
    """Asks before a call runs; `answered(Answer)` once, then the buttons go."""

    answered = Signal(object)

    def __init__(self, call, server: str, tool: str, parent=None):
        super().__init__(parent)
        self.setObjectName("toolApproval")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        self.server, self.tool = shown_name(server), shown_name(tool)  # names come from the server
        self.title = _label(f"Run the tool {self.tool} on the server {self.server}?", "toolApprovalTitle")
        layout.addWidget(self.title)
        self.arguments = _plain(pretty_arguments(call), "toolApprovalArguments", lines=12)
        layout.addWidget(self.arguments)
        row = QHBoxLayout()
        self.buttons = {}
        for answer, text in (
            (Answer.ONCE, "Allow once"),
            (Answer.ALWAYS, "Always allow this tool"),
            (Answer.DENY, "Deny"),
        ):
            button = QPushButton(text)
            button.setObjectName(f"toolApproval{answer.value.title()}")
            button.clicked.connect(lambda _=False, a=answer: self.answer(a))
            row.addWidget(button)
            self.buttons[answer] = button
        row.addStretch(1)
        layout.addLayout(row)
        self.status = _label("", "toolApprovalStatus")
        self.status.hide()
        layout.addWidget(self.status)
        self.result: Answer | None = None
        self._base = ""  # what the status says once answered
        self.running = False

    def answer(self, answer: Answer) -> None:
        if self.result is not None:
            return
        self.result = answer
        self._base = ANSWERED[answer]
        self._say(self._base)
        self.answered.emit(answer)

    def allowed_by_policy(self) -> None:
        """The tool's policy allowed it: no question, but the call is shown all the same."""
        self.result = Answer.ONCE
        self.title.setText(f"The tool {self.tool} on the server {self.server}")
        self._base = "Allowed by its policy"
        self._say(self._base)

    def set_running(self, on: bool) -> None:
        self.running = on
        self._say(f"{self._base} · running…" if on else self._base)

    def cancel(self) -> None:
        """Stop came while the card waited (the call did not run) or while its call ran."""
        if self.result is None:
            self._say("Stopped: the call did not run")
        elif self.running:
            self.running = False
            self._say(f"{self._base} · stopped while it ran")

    def _say(self, text: str) -> None:
        for button in self.buttons.values():
            button.hide()
        self.status.setText(text)
        self.status.show()


class ToolResultBlock(QFrame):
    """One call's result, collapsed to a line (tool · server · time or error); a click shows arguments and result."""

    def __init__(self, run: ToolRun, parent=None):
        super().__init__(parent)
        self.setObjectName("toolResult")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        layout = QVBoxLayout(self)
        result = run.result
        state = "error" if result.is_error else f"{result.seconds:.1f} s"
        where = f" · {shown_name(run.server)}" if run.server else ""
        self.toggle = QToolButton()
        self.toggle.setObjectName("toolResultToggle")
        self.toggle.setText(f"{shown_name(run.call.name)}{where} · {state}" + (" · cut" if result.truncated else ""))
        self.toggle.setCheckable(True)
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.toggled.connect(self.set_expanded)
        layout.addWidget(self.toggle)
        self.details = QFrame()
        inner = QVBoxLayout(self.details)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addWidget(_label("Arguments", "toolResultArgumentsTitle"))
        inner.addWidget(_plain(pretty_arguments(run.call), "toolResultArguments"))
        inner.addWidget(_label("Error" if result.is_error else "Result", "toolResultTitle"))
        self.result_view = _plain(result.text, "toolResultText", lines=14)
        inner.addWidget(self.result_view)
        layout.addWidget(self.details)
        self.details.hide()

    def set_expanded(self, on: bool) -> None:
        self.toggle.setArrowType(Qt.ArrowType.DownArrow if on else Qt.ArrowType.RightArrow)
        self.details.setVisible(on)
