"""The window's dialogs: export and import conversations, settings, model imports, the
shortcuts sheet.

Composed into MainWindow: WindowDialogs owns the dialogs kept alive while open (and the
download dialog, which the bridge's task signals update) and tells the window what happened
through signals. Every dialog is opened with open() (never exec()), so nothing here blocks the
event loop.
"""

from pathlib import Path

from PySide6.QtCore import QObject, QUrl, Signal
from PySide6.QtWidgets import QFileDialog

from app.core.settings import DEFAULTS_KEY, effective, load_defaults, overrides
from app.gui.folders import start_folder
from app.gui.models.download_dialog import CatalogueDownloadDialog, fit_options
from app.gui.server_panel import open_api_server_dialog
from app.gui.settings.dialog import SettingsDialog
from app.gui.settings.preferences import APP_KEY, PreferencesDialog, load_app_settings
from app.gui.window_keys import ShortcutsDialog
from app.transcripts import export, json_import
from engine.errors import ChinwagError
from engine.models.registry import display_name

EXPORT_FILTERS = {
    "md": "Markdown (*.md)",
    "json": "Chinwag JSON (*.json)",
    "html": "Web page (*.html)",
    "txt": "Plain text (*.txt)",
    "pdf": "PDF (*.pdf)",
}


def open_url(url: QUrl) -> bool:
    """Indirection so tests can replace the desktop call."""
    from PySide6.QtGui import QDesktopServices

    return QDesktopServices.openUrl(url)


class WindowDialogs(QObject):
    error = Signal(str)
    closed = Signal()  # a dialog closed: typing goes back to the composer
    appSettingsSaved = Signal()  # Preferences were saved: the look may have changed
    chatSettingsSaved = Signal(object)  # a chat's settings were saved (conv id)

    def __init__(self, window, store, bridge, chat, models, status):
        super().__init__(window)
        self.window = window  # every dialog's parent
        self.store, self.bridge, self.chat, self.models, self.status = store, bridge, chat, models, status
        self.open_dialogs: list = []  # non-modal dialogs kept alive while open
        self.download = None  # the download dialog while it is open

    def keep(self, dialog, modal: bool = True):
        """Open a dialog and keep it alive until it closes.

        Modal (the default): open(), window-modal, nothing here blocks the loop. Not modal: shown
        beside the window, which stays usable (File › Server… lists requests while the user chats)."""
        self.open_dialogs.append(dialog)
        dialog.finished.connect(lambda *_: self.open_dialogs.remove(dialog) if dialog in self.open_dialogs else None)
        dialog.finished.connect(dialog.deleteLater)
        dialog.finished.connect(lambda *_: self.closed.emit())  # back to typing
        if modal:
            dialog.open()
        else:
            dialog.show()
        return dialog

    def _file_dialog(self, title, mode, filters, on_selected, save_name=""):
        dialog = QFileDialog(self.window, title)
        dialog.setFileMode(mode)
        if mode == QFileDialog.FileMode.AnyFile:
            dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        if filters:
            dialog.setNameFilters(filters)
        dialog.setDirectory(start_folder())
        if save_name:
            dialog.selectFile(save_name)
        dialog.fileSelected.connect(lambda path: on_selected(path, dialog.selectedNameFilter()))
        return self.keep(dialog)

    def export_dialog(self):
        if not self.chat.conv_id:
            self.error.emit("There is no conversation to export yet.")
            return None
        conv = self.store.get_conversation(self.chat.conv_id)
        filters = list(EXPORT_FILTERS.values())

        def chosen(path, name_filter):
            fmt = next((k for k, v in EXPORT_FILTERS.items() if v == name_filter), "md")
            if Path(path).suffix.lower().lstrip(".") in EXPORT_FILTERS:
                fmt = Path(path).suffix.lower().lstrip(".")
            elif not Path(path).suffix:
                path = f"{path}.{fmt}"
            self.export_to(path, fmt)

        return self._file_dialog(
            "Export Conversation", QFileDialog.FileMode.AnyFile, filters, chosen, export.suggested_filename(conv, "md")
        )

    def export_to(self, path, fmt=None) -> bool:
        if not self.chat.conv_id:
            self.error.emit("There is no conversation to export yet.")
            return False
        self.chat.save_partial()
        fmt = fmt or Path(path).suffix.lstrip(".") or "md"
        try:
            conv = self.store.get_conversation(self.chat.conv_id)
            names = self.models.models  # as the window names them, servers' models included
            written = export.export_conversation(conv, fmt, path, model_name=lambda i: display_name(i, names))
        except ChinwagError as e:
            self.error.emit(f"Export failed: {e}")
            return False
        except OSError as e:
            self.error.emit(f"Export failed: cannot write {path}: {e.strerror or e}")
            return False
        self.status.showMessage(f"Exported to {written}", 8000)
        return True

    def import_dialog(self):
        return self._file_dialog(
            "Import Conversation",
            QFileDialog.FileMode.ExistingFile,
            ["Chinwag JSON (*.json)", "All files (*)"],
            lambda p, _f: self.import_from(p),
        )

    def import_from(self, path) -> bool:
        try:
            conv = json_import.import_conversation(self.store, path)
        except ChinwagError as e:
            self.error.emit(f"Import failed: {e}")
            return False
        self.chat.refresh_list()
        self.chat.open_conversation(conv.id)
        self.status.showMessage(f"Imported “{conv.title}”", 8000)
        return True

    def preferences_dialog(self):
        defaults = load_defaults(self.store)
        control = getattr(self.window, "server_control", None)

        def status() -> str:
            return f"on at {control.url()}" if control is not None and control.running else "off"

        dialog = PreferencesDialog(
            defaults,
            load_app_settings(self.store),
            self.models.models,
            self.window,
            server_status=status if control is not None else None,
            open_server=(lambda: open_api_server_dialog(self.window)) if control is not None else None,
            current_model=self._local_model_id(),
        )
        if control is not None:
            control.changed.connect(dialog.refresh_server)  # a bound slot: disconnected when the dialog goes
        dialog.accepted.connect(lambda: self.save_preferences(dialog.values(), dialog.app_values()))
        return self.keep(dialog)

    def _local_model_id(self) -> str:
        """The loaded model's id if it runs here (a server's model has no KV cache setting of ours)."""
        model = self.bridge.current_model
        return model.id if model is not None and not model.server else ""

    def save_preferences(self, values: dict, app_values: dict | None = None):
        try:
            self.store.set_state(DEFAULTS_KEY, values)
            if app_values is not None:
                self.store.set_state(APP_KEY, app_values)
        except ChinwagError as e:
            self.error.emit(f"Preferences not saved: {e}")
            return
        self.appSettingsSaved.emit()

    def chat_settings_dialog(self):
        try:
            conv_id = self.chat.ensure_conversation()
            conv = self.store.get_conversation(conv_id)
        except ChinwagError as e:
            self.error.emit(str(e))
            return None
        defaults = load_defaults(self.store)
        dialog = SettingsDialog(
            effective(conv.settings, defaults), defaults, f"Settings for “{conv.title}”", self.window
        )
        dialog.accepted.connect(lambda: self.save_chat_settings(conv_id, dialog.values()))
        return self.keep(dialog)

    def save_chat_settings(self, conv_id, values: dict):
        try:
            self.store.update_settings(conv_id, overrides(values, load_defaults(self.store)))
        except ChinwagError as e:
            self.error.emit(f"Settings not saved: {e}")
            return
        self.chatSettingsSaved.emit(conv_id)

    # --- models: import, add, download, folder -----------------------------
    def import_gguf_dialog(self):
        return self._file_dialog(
            "Import GGUF",
            QFileDialog.FileMode.ExistingFile,
            ["GGUF models (*.gguf)", "All files (*)"],
            lambda p, _f: self.bridge.import_gguf(p),
        )

    def add_folder_dialog(self):
        return self._file_dialog(
            "Add Model Folder", QFileDialog.FileMode.Directory, [], lambda p, _f: self.bridge.add_model_folder(p)
        )

    def download_dialog(self):
        state = self.bridge.engine.state if self.bridge.current_model else None
        dialog = CatalogueDownloadDialog(
            self.window,
            installed=[m.id for m in self.models.models],
            **fit_options(load_app_settings(self.store), state.weight_bytes if state else 0),
        )
        dialog.searchRequested.connect(self.bridge.search_models)
        self.bridge.searchFinished.connect(dialog.on_search_results)
        self.bridge.searchFailed.connect(dialog.on_search_failed)
        dialog.downloadRequested.connect(self.bridge.download_model)
        dialog.cancelRequested.connect(self.bridge.cancel_download)
        self.download = dialog
        dialog.finished.connect(lambda *_: setattr(self, "download", None))
        return self.keep(dialog)

    def show_models_folder(self):
        from engine.paths import models_dir

        if not open_url(QUrl.fromLocalFile(str(models_dir()))):
            self.error.emit(f"Could not open {models_dir()}")

    def shortcuts_dialog(self):
        return self.keep(ShortcutsDialog(self.window))

    def about_dialog(self):
        from app.gui.about import AboutDialog

        return self.keep(AboutDialog(self.window, open_url=lambda url: open_url(url)))
