"""The window's status bar: the loaded model, load progress, context, KV memory and the engine's
state. A widget of its own, composed into MainWindow: it owns its labels and the stats it shows,
and reads the bridge only for the loaded model and its KV memory."""

from PySide6.QtCore import QEvent, QSize, Qt, QTimer
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QLabel, QProgressBar, QSizePolicy, QStatusBar, QToolButton

from app.core.sizes import format_bytes
from app.core.turns import stat
from app.gui import tooltips
from app.gui.chat.controller import reading_text
from engine.types import LOADED_STAGE, EngineStatus

STATE_LABELS = {
    "starting": "Starting engine…",  # the bridge's own states, before and instead of the engine's
    EngineStatus.IDLE: "No model",
    EngineStatus.LOADING: "Loading model…",
    EngineStatus.READY: "Ready",
    EngineStatus.GENERATING: "Generating…",
    "error": "Engine error",
}
MEMORY_REFRESH_MS = 200


class FittingLabel(QLabel):
    """A status label that shrinks below its text when the bar is too narrow (a small window, a big
    font) and draws the text elided instead of cut; text() stays whole."""

    MIN_CHARS = 6  # "Conte…": enough to tell the labels apart

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), self.MIN_CHARS * self.fontMetrics().averageCharWidth()), hint.height())

    def give_way(self):
        """Take only the room the other labels leave (at least MIN_CHARS), rather than a share of it."""
        self.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.setMinimumWidth(self.minimumSizeHint().width())

    def changeEvent(self, event):
        super().changeEvent(event)
        if (
            event.type() == QEvent.Type.FontChange
            and self.sizePolicy().horizontalPolicy() == QSizePolicy.Policy.Ignored
        ):
            self.setMinimumWidth(self.minimumSizeHint().width())  # MIN_CHARS of the new size

    def paintEvent(self, event):
        rect = self.contentsRect()
        shown = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, rect.width())
        painter = QPainter(self)
        align = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
        self.style().drawItemText(painter, rect, align, self.palette(), self.isEnabled(), shown, self.foregroundRole())
        painter.end()


class StatusBar(QStatusBar):
    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.bridge = bridge
        self.stats = None  # the stats shown (TurnStats or a stats dict)
        self.stats_model = ""  # the id of the model that wrote them
        self.model_label = FittingLabel("No model")
        self.model_label.setObjectName("statusModel")
        self.progress = QProgressBar()
        self.progress.setObjectName("loadProgress")
        self.progress.setMaximumWidth(180)
        self.progress.setTextVisible(False)  # the state label says the percentage (seen on X: 42% beside 39%)
        self.progress.setVisible(False)
        self.context_label = FittingLabel("")
        self.context_label.setObjectName("statusContext")
        self.kv_label = FittingLabel("")
        self.kv_label.setObjectName("statusKV")
        self.state_label = FittingLabel(STATE_LABELS["starting"])
        self.state_label.setObjectName("statusState")
        self.model_label.give_way()  # the header names the model too: the other labels keep their text
        self.addWidget(self.model_label, 1)
        self.addWidget(self.progress)
        for label in (self.context_label, self.kv_label, self.state_label):
            self.addPermanentWidget(label)
        self.activity = ""  # a background read's steady line, shown in the state's place (show_activity)
        self._cancel_activity = None
        self.cancel_button = QToolButton()
        self.cancel_button.setObjectName("statusCancel")
        self.cancel_button.setText("Cancel")
        self.cancel_button.setAutoRaise(True)
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self._on_cancel)
        self.addPermanentWidget(self.cancel_button)
        # KV grows as a reply is written: shown again at most every MEMORY_REFRESH_MS, not per token.
        self.memory_timer = QTimer(self)
        self.memory_timer.setSingleShot(True)
        self.memory_timer.setInterval(MEMORY_REFRESH_MS)
        self.memory_timer.timeout.connect(self.show_memory)
        bridge.delta.connect(lambda _conv, _text: self.memory_timer.isActive() or self.memory_timer.start())
        bridge.draftReading.connect(lambda _conv: self.show_draft_reading())
        bridge.draftPrefilled.connect(lambda _conv, result: self.show_draft_read(result))

    def show_state(self, text: str):
        if self.activity and text == STATE_LABELS[EngineStatus.READY]:
            return  # not "Ready" beside a document being read: the read's line stays
        self.state_label.setText(text)

    def show_engine_state(self):
        """The bridge's state in words ("Ready", "Generating…")."""
        self.show_state(STATE_LABELS.get(self.bridge.state, self.bridge.state))

    def show_activity(self, text: str, cancel=None):
        """One steady line while documents are read or read ahead, in the state's place, with Cancel
        (calls `cancel`); "" ends it and the engine's state is shown again."""
        self.activity, self._cancel_activity = text, cancel if text else None
        self.cancel_button.setVisible(bool(text) and cancel is not None)
        self.cancel_button.setToolTip("Stop reading the documents (asking reads what it needs)" if text else "")
        if text:
            self.state_label.setText(text)
        else:
            self.show_engine_state()

    def _on_cancel(self):
        cancel = self._cancel_activity
        self.show_activity("")
        if cancel is not None:
            cancel()

    def show_loading(self, loading: bool):
        """A model load started (a busy bar until its progress arrives) or ended."""
        self.progress.setVisible(loading)
        if loading:
            self.progress.setRange(0, 0)

    def hide_progress_unless_loading(self):
        self.progress.setVisible(self.bridge.state == EngineStatus.LOADING)

    def show_model(self, info):
        self.progress.setVisible(False)
        self.model_label.setText(info.name or info.id)
        self.model_label.setToolTip(tooltips.plain(info.path))

    def show_load_progress(self, p):
        self.progress.setVisible(True)
        if p.stage == LOADED_STAGE:
            # Not "Ready" beside the old model's name: the state change right after names the new one.
            self.progress.setRange(0, 1000)
            self.progress.setValue(1000)
            return
        stage = p.stage or "Loading"
        text = stage[:1].upper() + stage[1:] + ("…" if not stage.endswith("…") else "")
        if p.total:
            fraction = min(1.0, p.done / p.total)
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * fraction))
            text += f" {int(100 * fraction)}%"
        else:
            self.progress.setRange(0, 0)  # a step with no measure: a busy bar, never a fake 0%
        self.state_label.setText(text)

    def show_task_progress(self, p):
        """An import, folder or download outside its dialog: the bar, and its stage for a while."""
        self.progress.setVisible(True)
        if p.total:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * min(1.0, p.done / p.total)))
        self.showMessage(p.stage, 5000)

    def _limit(self) -> int:
        """The context limit: the shown stats' if the loaded model wrote them, else the loaded model's."""
        model = self.bridge.current_model
        own = (model.memory_context or model.context_length) if model else 0
        if self._foreign():
            return own  # another model's limit says nothing about this one's
        return stat(self.stats, "context_limit", 0) or own

    def _context(self, used: str, limit: int) -> str:
        """'Context 1,234 / 32,768', or with a cap from memory 'Context 1,234 / 12,288 of 32,768: memory'
        (its tooltip says why and what to change)."""
        model = self.bridge.current_model
        capped = model.memory_context if model else 0
        if limit and capped and limit == capped and capped < model.context_length:
            self.context_label.setToolTip(
                f"The memory limit leaves this chat's cache room for {capped:,} tokens of the model's"
                f" {model.context_length:,}: raise it in Preferences or store the cache at 8 or 4 bits"
                " (Model Settings)"
            )
            return f"Context {used} / {limit:,} of {model.context_length:,}: memory"
        return f"Context {used} / {limit:,}"

    def _foreign(self) -> bool:
        """The stats shown were written by a model other than the loaded one (their counts are in its tokens)."""
        model = self.bridge.current_model
        return bool(self.stats and model is not None and self.stats_model and self.stats_model != model.id)

    def show_draft_reading(self):
        """The message being typed is read ahead: the context it fills is not known yet (not "0")."""
        limit = self._limit()
        self.context_label.setToolTip("Reading the message you are typing ahead, so the reply starts sooner")
        self.context_label.setText(self._context("…", limit) if limit else "")

    def show_draft_read(self, result):
        """The draft was read ahead: the context the chat fills with it (None: the read was refused)."""
        limit = self._limit()
        if result is None or not result.prompt_tokens or not limit:
            self.refresh_stats()
            return
        self.context_label.setToolTip("With the message you are typing (read ahead)")
        self.context_label.setText(self._context(f"{result.prompt_tokens:,}", limit))

    def show_stats(self, stats):
        if stats is not self.stats:  # a stored reply names its model; a live turn's is the loaded one
            current = self.bridge.current_model
            self.stats_model = stats.get("model_id", "") if isinstance(stats, dict) else (current.id if current else "")
        self.stats = stats
        self.context_label.setToolTip("")
        limit = self._limit()
        used = stat(stats, "kv_offset", 0)
        foreign = self._foreign()
        self.context_label.setText(self._context("…" if foreign else f"{used:,}", limit) if limit else "")
        if foreign:
            self.context_label.setToolTip("Counted in this model's tokens when it next reads the chat")
        self.show_memory()

    def show_memory(self):
        """KV memory now (the engine's figure, updated token by token), and the loaded model's
        memory in use (weights and caches) against the limit it was planned for."""
        engine_kv = self.bridge.kv_bytes() if self.bridge.current_model else 0  # read once: the engine moves it
        kv = engine_kv or (0 if self._foreign() else stat(self.stats, "kv_bytes", 0))
        state = self.bridge.engine.state if self.bridge.current_model else None
        weights, limit = (state.weight_bytes, state.memory_limit_bytes) if state else (0, 0)
        text = f"KV {format_bytes(kv)}" if kv else ""
        if limit:
            text += f"{' · ' if text else ''}Memory {format_bytes(weights + engine_kv)} / {format_bytes(limit)}"
        self.kv_label.setText(text)
        self.kv_label.setToolTip(
            f"In use: the model's weights ({format_bytes(weights)}) and every chat's KV cache"
            f" ({format_bytes(engine_kv)}), against the memory limit ({format_bytes(limit)};"
            " Preferences › Memory limit)"
            if limit
            else ""
        )

    def refresh_stats(self):
        """The same stats again (the model, and so the context limit or KV memory, changed)."""
        self.show_stats(self.stats)

    def show_reading(self, progress):
        """While a prompt is read: its progress, and the context it will fill."""
        if progress is None:
            self.show_engine_state()
            return
        if progress.done < progress.total:
            self.state_label.setText(reading_text(progress))
        if progress.context_limit:
            self.context_label.setText(self._context(f"{progress.prompt_tokens:,}", progress.context_limit))
