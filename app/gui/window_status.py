"""The window's status: the status bar (model, load progress, context, KV memory, state)
and the welcome state's model line. A mixin of MainWindow, like WindowDialogs."""

from PySide6.QtWidgets import QLabel, QProgressBar

from app.gui.chat.controller import reading_text
from app.gui.chat.message_widget import format_bytes
from engine.types import EngineStatus

STATE_LABELS = {
    "starting": "Starting engine…",  # the bridge's own states, before and instead of the engine's
    EngineStatus.IDLE: "No model",
    EngineStatus.LOADING: "Loading model…",
    EngineStatus.READY: "Ready",
    EngineStatus.GENERATING: "Generating…",
    "error": "Engine error",
}


class WindowStatus:
    def _build_status_bar(self):
        bar = self.statusBar()
        self.model_label = QLabel("No model")
        self.model_label.setObjectName("statusModel")
        self.progress = QProgressBar()
        self.progress.setObjectName("loadProgress")
        self.progress.setMaximumWidth(180)
        self.progress.setVisible(False)
        self.context_label = QLabel("")
        self.context_label.setObjectName("statusContext")
        self.kv_label = QLabel("")
        self.kv_label.setObjectName("statusKV")
        self.state_label = QLabel(STATE_LABELS["starting"])
        self.state_label.setObjectName("statusState")
        bar.addWidget(self.model_label)
        bar.addWidget(self.progress)
        for label in (self.context_label, self.kv_label, self.state_label):
            bar.addPermanentWidget(label)

    def _on_load_progress(self, p):
        self.progress.setVisible(True)
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

    def _show_stats(self, stats):
        self._stats = stats
        get = (stats.get if isinstance(stats, dict) else (lambda k, d=0: getattr(stats, k, d))) if stats else None
        model = self.bridge.current_model
        limit = (get("context_limit", 0) if get else 0) or (model.context_length if model else 0)
        used = get("kv_offset", 0) if get else 0
        self.context_label.setText(f"Context {used:,} / {limit:,}" if limit else "")
        kv = self.bridge.kv_bytes() if self.bridge.current_model else 0
        if get and not kv:
            kv = get("kv_bytes", 0)
        self.kv_label.setText(f"KV {format_bytes(kv)}" if kv else "")

    def _show_reading(self, progress):
        """While a prompt is read: its progress, and the context it will fill, in the status bar."""
        if progress is None:
            self.state_label.setText(STATE_LABELS.get(self.bridge.state, self.bridge.state))
            return
        if progress.done < progress.total:
            self.state_label.setText(reading_text(progress))
        if progress.context_limit:
            self.context_label.setText(f"Context {progress.prompt_tokens:,} / {progress.context_limit:,}")

    def _update_welcome(self):
        model = self.bridge.current_model
        if model is not None:
            self.chat_view.welcome.set_model(model.name or model.id, server_url=model.path if model.server else "")
        elif self._loading_spec and (self.bridge.state in ("starting", EngineStatus.LOADING) or self._startup):
            self.chat_view.welcome.set_model(self._model_name(self._loading_spec), loading=True)
        else:
            self.chat_view.welcome.set_model("")
