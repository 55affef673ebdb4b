"""The main window: sidebar | notices + chat + composer, menus, status bar.

The window gets its Store and Engine from outside (`MainWindow(store, engine)`), so tests
can give it the real engine on the tiny model or a fake. It is composed of parts that own
their state: the status bar (`self.status`, window_status.py), the dialogs (`self.dialogs`,
window_dialogs.py), the keyboard side (`self.keys`, window_keys.py), the model list
(`self.models`) and the chat controller (`self.chat`); the window wires them together and
follows the engine. Nothing here blocks: dialogs are opened with open(), engine work runs as
tasks kept by the EngineBridge.
"""

from pathlib import Path

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QMainWindow,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.chats import is_unsaved
from app.core.store import MessageStatus
from app.gui import shortcuts, theme
from app.gui.chat.controller import ChatController
from app.gui.chat.header import ChatHeader
from app.gui.chat.panes import ChatPanes
from app.gui.chat.read_ahead import INSTRUCTIONS, ReadAhead
from app.gui.chat.view import ChatView
from app.gui.composer import Composer
from app.gui.engine_bridge import EngineBridge
from app.gui.models.menu import ModelMenu
from app.gui.models.model_list import ModelList
from app.gui.models.picker import ModelPicker
from app.gui.models.server_dialog import open_server_dialog
from app.gui.notices import NoticeArea
from app.gui.server_panel import ServerControl, ServingButton, open_api_server_dialog, other_server_line
from app.gui.settings.fit import fit_options
from app.gui.settings.preferences import load_app_settings
from app.gui.window_dialogs import WindowDialogs
from app.gui.window_keys import WindowKeys
from app.gui.window_status import STATE_LABELS, StatusBar
from engine.errors import ChinwagError
from engine.models.folders import STARTER_ID, STARTER_NAME  # no MLX: the window paints before it loads
from engine.types import EngineStatus, ModelSource, ModelStatus

MIN_SIZE = (720, 480)  # below this the composer and a message line stop being usable
ERROR_BANNER_MS = 20_000  # an error banner also clears on the next thing that works


def load_stylesheet() -> str:
    from importlib import resources

    try:
        return resources.files("resources").joinpath("style.qss").read_text("utf-8")
    except OSError:
        return ""


class MainWindow(QMainWindow):
    def __init__(self, store, engine=None, engine_factory=None, parent=None):
        super().__init__(parent)
        self.setObjectName("mainWindow")
        self.setWindowTitle("Chinwag")
        self.resize(1100, 760)
        self.setMinimumSize(*MIN_SIZE)
        self.setStyleSheet(load_stylesheet())
        self.store = store
        kwargs = {"engine_factory": engine_factory} if engine_factory else {}
        self.bridge = EngineBridge(engine, parent=self, **kwargs)
        self.bridge.fit_options = lambda spec: fit_options(load_app_settings(self.store), spec)
        self.models = ModelList(self)  # the one model list: the Model menu and the picker show it
        self._loading_spec = ""  # the model being loaded (or last asked for)
        self._startup = False  # until the start-up load ends, "no model yet" means "loading"
        self.status = StatusBar(self.bridge, self)
        self.setStatusBar(self.status)

        from app.gui.sidebar import Sidebar

        self.sidebar = Sidebar()
        self.chat_view = ChatView()
        self.chat_view.model_name = self._model_name
        self.composer = Composer()
        self.notices = NoticeArea()
        self.header = ChatHeader()
        right = QWidget()
        column = QVBoxLayout(right)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.header)
        column.addWidget(self.notices)
        from app.gui.tools.chat_menu import ChatToolsButton
        from app.gui.tools.host import WindowTools

        self.tools = WindowTools(store, self)  # the MCP servers replies can call: start with the engine
        self.tools_button = ChatToolsButton(self.tools, self.bridge)  # this chat's servers and their cost
        self.header.add_widget(self.tools_button)
        self.model_picker = ModelPicker(self.models)  # the chat header's model picker, at its right end
        self.header.add_widget(self.model_picker)
        column.addWidget(self.chat_view, 1)
        column.addWidget(self.composer)
        splitter = QSplitter()
        splitter.addWidget(self.sidebar)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 840])
        splitter.setChildrenCollapsible(False)
        self.splitter = splitter
        self.setCentralWidget(splitter)

        self.chat_panes = ChatPanes(self.chat_view, self.composer, self.sidebar)  # what the controller drives
        self.chat = ChatController(store, self.bridge, self.chat_panes, self)
        self.chat_panes.wire(self.chat)
        self.chat.tools = self.tools
        self.tools.notice.connect(lambda text: self.notices.show_notice("tools", text, "info", timeout_ms=15000))
        self.tools_button.serversRequested.connect(self.open_tools)
        self.chat.conversationChanged.connect(
            lambda c: self.tools_button.set_conversation(
                c, c is not None and c == self.chat.conv_id and self._is_new(c)
            )
        )
        self.keys = WindowKeys(self, self.composer, self.sidebar, self.chat_view, self.chat, self.status)
        self.dialogs = WindowDialogs(self, store, self.bridge, self.chat, self.models, self.status)
        self.dialogs.error.connect(self.show_error)
        self.dialogs.closed.connect(self.keys.focus_composer)
        self.notices.focusReleased.connect(self.keys.focus_composer)  # Load It, Undo, Switch to…
        self.dialogs.appSettingsSaved.connect(self.apply_app_settings)
        self.dialogs.appSettingsSaved.connect(self.apply_fit_settings)
        self.dialogs.chatSettingsSaved.connect(self._on_chat_settings_saved)
        self.header.toggleSidebarRequested.connect(self.keys.toggle_sidebar)
        self.header.settingsRequested.connect(self.dialogs.chat_settings_dialog)
        self.chat.error.connect(self.show_error)
        self.chat.conversationChanged.connect(self._on_conversation_changed)
        self.chat.statsChanged.connect(self.status.show_stats)
        self.chat.generatingChanged.connect(self._on_generating)
        self.chat.editingChanged.connect(lambda _on: self._on_generating(self.chat.gen is not None))
        self.chat.queueChanged.connect(lambda: self._on_generating(self.chat.gen is not None))
        self.chat.deletedUndoable.connect(self._offer_undo)
        self.chat.conversationChanged.connect(lambda _c: self.keys.focus_after_switch())
        self.sidebar.list.itemClicked.connect(lambda _item: self.keys.focus_composer())
        self.sidebar.list.itemActivated.connect(lambda _item: self.keys.focus_composer())
        self.chat.readingProgress.connect(self.status.show_reading)
        tray = self.composer.attachments  # its reading: one steady line with Cancel, not flickering messages
        tray.progress.connect(lambda text: self.status.show_activity(text, tray.cancel_progress))
        # A changed chat (instructions, model, version, a fork) is read before the next Enter.
        self.read_ahead = ReadAhead(store, self.bridge, self.chat, self)
        self.read_ahead.labelChanged.connect(
            lambda text: self.status.show_state(text) if text else self.status.show_engine_state()
        )
        # Preferences may change the default system prompt: the open chat is read for it (if it changed).
        self.dialogs.appSettingsSaved.connect(lambda: self.read_ahead.reread(self.chat.conv_id, INSTRUCTIONS))

        self._applied_look = ("system", 0)
        theme.install_style()
        self.apply_app_settings()
        self._build_menus()
        self._connect_bridge()
        self._update_composer()

        if store.notice:
            kind = "warning" if store.read_only else "info"
            self.notices.show_notice("store", store.notice[0].upper() + store.notice[1:] + ".", kind)
        if line := other_server_line():  # `chinwag serve` on this data folder: a second model, the same kv/
            self.notices.show_notice("serving", line, "warning")
        self.chat.refresh_list()
        geometry = store.get_state("window_geometry")
        if geometry:
            from PySide6.QtCore import QByteArray

            self.restoreGeometry(QByteArray.fromBase64(geometry.encode("ascii")))
        last = store.get_state("last_conversation")
        if last and last in self.sidebar.ids():
            self.chat.open_conversation(last)
        self.keys.focus_composer()  # a newcomer types straight away

    # --- building -------------------------------------------------------
    def _action(self, menu, text, slot, shortcut=None, role=None, name=None):
        action = QAction(text, self)
        if shortcut is not None:
            sequences = shortcut if isinstance(shortcut, list) else [shortcut]
            action.setShortcuts([QKeySequence(k) for k in sequences if not QKeySequence(k).isEmpty()])
        if role is not None:
            action.setMenuRole(role)
        action.triggered.connect(lambda _checked=False: slot())
        action.setObjectName(name or text)
        menu.addAction(action)
        return action

    def _build_menus(self):
        bar = self.menuBar()
        dialogs, keys = self.dialogs, self.keys
        file_menu = bar.addMenu("&File")
        self.new_action = self._action(file_menu, "New Chat", self.chat.new_conversation, shortcuts.NEW_CHAT)
        self.attach_action = self._action(file_menu, "Attach File…", self.composer.choose_files, shortcuts.ATTACH)
        file_menu.addSeparator()
        self.import_action = self._action(file_menu, "Import Conversation…", dialogs.import_dialog)
        self.export_action = self._action(file_menu, "Export Conversation…", dialogs.export_dialog, shortcuts.EXPORT)
        file_menu.addSeparator()
        prefs = QKeySequence(QKeySequence.StandardKey.Preferences)
        self.prefs_action = self._action(
            file_menu,
            "Preferences…",
            dialogs.preferences_dialog,
            prefs if not prefs.isEmpty() else shortcuts.PREFERENCES,
            QAction.MenuRole.PreferencesRole,
        )
        self.server_control = ServerControl(self.bridge, self)  # File › Server…: the OpenAI-compatible API
        self.server_action = self._action(file_menu, "Server…", lambda: open_api_server_dialog(self))
        self.server_control.waiting.connect(self._show_waiting)
        self.serving_button = ServingButton(self.server_control, lambda: open_api_server_dialog(self))
        self.status.addPermanentWidget(self.serving_button)  # "Serving 127.0.0.1:8080" once the dialog is closed
        file_menu.addSeparator()
        self._action(file_menu, "Quit", self.close, QKeySequence.StandardKey.Quit, QAction.MenuRole.QuitRole)

        edit_menu = bar.addMenu("&Edit")
        # Text fields keep their own Ctrl+Z (Qt gives them the key first); elsewhere it undoes a delete.
        self.undo_action = self._action(edit_menu, "Undo", keys.undo, shortcuts.UNDO)
        edit_menu.addSeparator()
        for name, key in (
            ("Cut", QKeySequence.StandardKey.Cut),
            ("Copy", QKeySequence.StandardKey.Copy),
            ("Paste", QKeySequence.StandardKey.Paste),
            ("Select All", QKeySequence.StandardKey.SelectAll),
        ):
            self._action(edit_menu, name, lambda n=name: keys.edit_focused(n), key, name=f"edit{name.replace(' ', '')}")
        edit_menu.addSeparator()
        self.copy_reply_action = self._action(
            edit_menu, "Copy Last Reply", keys.copy_last_reply, shortcuts.COPY_LAST_REPLY
        )
        self.find_action = self._action(edit_menu, "Find…", self.sidebar.focus_search, shortcuts.FIND)

        view_menu = bar.addMenu("&View")
        view_menu.addAction(keys.sidebar_action)

        chat_menu = bar.addMenu("&Chat")
        self.stop_action = self._action(chat_menu, "Stop", self.escape, shortcuts.STOP)
        self.stop_action.setEnabled(False)
        self.regen_action = self._action(chat_menu, "Regenerate Reply", self.chat.regenerate, shortcuts.REGENERATE)
        chat_menu.addSeparator()
        self.next_chat_action = self._action(chat_menu, "Next Chat", lambda: keys.step_chat(1), shortcuts.NEXT_CHAT)
        self.previous_chat_action = self._action(
            chat_menu, "Previous Chat", lambda: keys.step_chat(-1), shortcuts.PREVIOUS_CHAT
        )
        chat_menu.addSeparator()
        self._action(chat_menu, "Rename Chat", lambda: self.sidebar.start_rename(self.chat.conv_id), shortcuts.RENAME)
        self._action(
            chat_menu, "Delete Chat", lambda: self.chat.delete(self.chat.conv_id) if self.chat.conv_id else None
        )
        chat_menu.addSeparator()
        self.chat_settings_action = self._action(chat_menu, "Chat Settings…", dialogs.chat_settings_dialog)
        self.tools_action = self._action(chat_menu, "MCP Servers…", self.open_tools)

        self.model_menu = ModelMenu(self.models, self)
        bar.addMenu(self.model_menu)
        models = self.models  # the Model menu and the picker ask through it: each handler once
        models.modelChosen.connect(self.load_model)
        models.importGgufRequested.connect(dialogs.import_gguf_dialog)
        models.addFolderRequested.connect(dialogs.add_folder_dialog)
        models.downloadRequested.connect(dialogs.download_dialog)
        models.showFolderRequested.connect(dialogs.show_models_folder)
        models.connectServerRequested.connect(lambda: open_server_dialog(self))

        help_menu = bar.addMenu("&Help")
        self.shortcuts_action = self._action(
            help_menu, "Keyboard Shortcuts", dialogs.shortcuts_dialog, shortcuts.SHORTCUTS_SHEET
        )
        help_menu.addSeparator()
        self.about_action = self._action(
            help_menu, "About Chinwag", dialogs.about_dialog, role=QAction.MenuRole.AboutRole
        )

    def _connect_bridge(self):
        b = self.bridge
        b.stateChanged.connect(self._on_state)
        b.startFailed.connect(lambda reason: self.show_error(f"The engine could not start: {reason}"))
        b.modelsListed.connect(self._on_models)
        b.loadProgress.connect(self.status.show_load_progress)
        b.modelLoaded.connect(self._on_model_loaded)
        b.loadFailed.connect(self._on_load_failed)
        b.taskProgress.connect(self._on_task_progress)
        b.taskFinished.connect(self._on_task_finished)
        b.taskFailed.connect(self._on_task_failed)

    # --- engine ---------------------------------------------------------
    def open_tools(self):
        """Chat › MCP Servers…; when it closes, the servers restart if they changed."""
        from app.gui.tools.dialog import open_tools_dialog

        dialog = open_tools_dialog(self)
        if not dialog.property("toolsWired"):
            dialog.setProperty("toolsWired", True)
            dialog.finished.connect(lambda _r: self.tools.restart_if_changed())
        return dialog

    def _is_new(self, conv_id) -> bool:
        """A chat whose first message is being sent (it has no reply yet)."""
        try:
            return not any(m.role != "user" for m in self.store.get_conversation(conv_id).messages)
        except ChinwagError:
            return False

    def _show_waiting(self, line: str) -> None:
        """A request to the server waits behind this window's reply: say so for a while ("" : it began)."""
        if line:
            self.status.showMessage(line, 10_000)

    def start_engine(self, model_spec: str | None = None):
        """Start the engine in the background and load the last used model (or the starter)."""
        self.tools.start()  # the MCP servers start beside it, in the background
        default = STARTER_ID
        chosen = load_app_settings(self.store)["default_model"]
        spec = model_spec or chosen or self.store.get_state("last_model") or default
        self._loading_spec = spec
        self._startup = True  # until the start-up load ends, "no model yet" means "loading"
        task = self.bridge.start(spec, fallback=default if not model_spec else None)
        task.add_done_callback(lambda _task: self._startup_done())
        self._update_composer()
        return task

    def _startup_done(self):
        self._startup = False
        self._on_state(self.bridge.state)  # the state's words, the composer, the welcome: no longer "Loading…"
        if self.bridge.current_model is None and self.chat.queue:
            self.chat.unqueue()
            self.show_error(
                "Your message was not sent: no model could be loaded. Choose one in the Model menu, "
                "then press Ctrl+R to send it."
            )

    def apply_app_settings(self):
        """Theme and font size from Preferences (left alone while they are the system's)."""
        values = load_app_settings(self.store)
        look = (values["theme"], values["font_size"])
        if look != self._applied_look:
            theme.apply(*look)
            self._applied_look = look
            self.setStyleSheet(load_stylesheet())  # re-resolve palette() colours in the style sheet
            chat = getattr(self, "chat", None)  # absent while the window is being built
            if chat is not None and chat.conv_id and chat.gen is None:
                chat.open_conversation(chat.conv_id)  # messages re-render in the new colours and size

    def apply_fit_settings(self):
        """A changed memory limit or KV cache setting: the loaded model loads again with it."""
        model = self.bridge.current_model
        if model is None or model.server or self.bridge.applied_fit is None:
            return
        try:
            wanted = fit_options(load_app_settings(self.store), model.id)
        except ChinwagError as e:
            self.show_error(str(e))
            return
        if wanted != self.bridge.applied_fit:
            self.load_model(model.id)

    def load_model(self, spec: str):
        if self.bridge.state == EngineStatus.LOADING:
            return None
        self._loading_spec = spec
        return self.bridge.load_model(spec)

    def _on_state(self, state):
        self._update_welcome()
        label = STATE_LABELS.get(state, state)
        loading = state == EngineStatus.LOADING
        if self._loading_spec and (loading or (state == EngineStatus.IDLE and self._startup)):
            label = f"Loading {self._model_name(self._loading_spec)}…"
        self.status.show_state(label)
        self.models.set_busy(loading)
        self.status.show_loading(loading)
        self._update_composer()

    def _on_models(self, models):
        current = self.bridge.current_model
        self.models.set_models(models, current.id if current else None)
        self.chat_view.refresh_model_names()
        self._suggest_conversation_model()

    def _model_name(self, spec):
        info = self.models.get(spec)
        if info is not None:
            return info.name or info.id
        if spec == STARTER_ID:  # before the model list arrives: never show the raw id
            return STARTER_NAME
        return Path(str(spec)).name or str(spec)

    def _on_model_loaded(self, info):
        self.status.show_model(info)
        self.chat_view.set_continue_allowed(info.source != ModelSource.SERVER)  # a server cannot write on
        self.models.set_current(info.id)
        self.notices.dismiss("load")
        if not self.store.read_only:
            try:
                self.store.set_state("last_model", info.id)
            except ChinwagError:
                pass
        self.status.refresh_stats()
        self._update_composer()
        self._suggest_conversation_model()
        self.notices.dismiss("error")  # something worked: an old error no longer applies
        self._update_welcome()
        self.chat.send_queued()  # a message queued while the model loaded

    def _on_load_failed(self, spec, reason):
        self.status.progress.setVisible(False)
        current = self.bridge.current_model
        keep = f" {current.name or current.id} is still loaded." if current else ""
        self.notices.show_notice("load", f"Could not load {self._model_name(spec)}: {reason}.{keep}", "error")
        self.status.showMessage(f"Could not load {self._model_name(spec)}", 8000)
        self._update_composer()

    def _update_composer(self):
        state = self.bridge.state
        if self.store.read_only:
            self.composer.set_ready(False, "Conversations are read-only, so new messages cannot be saved.")
        elif state == "starting":
            self.composer.set_ready(
                False, "Starting the engine… you can send now: your message waits for the model.", queue=True
            )
        elif state == "error":
            self.composer.set_ready(False, f"The engine could not start: {self.bridge.last_error}")
        elif self.bridge.current_model is None and (state == EngineStatus.LOADING or self._startup):
            self.composer.set_ready(
                False,
                f"Loading {self._model_name(self._loading_spec)}… you can send now: your message waits for the model.",
                queue=True,
            )
        elif self.bridge.current_model is None:
            why = f" ({self.bridge.last_error})" if self.bridge.last_error else ""
            self.composer.set_ready(False, f"No model is loaded{why}. Choose one in the Model menu.")
        elif state == EngineStatus.LOADING:
            self.composer.set_ready(False, f"Switching to {self._model_name(self._loading_spec)}…")
        else:
            self.composer.set_ready(True)

    def _update_welcome(self):
        model = self.bridge.current_model
        if model is not None:
            self.chat_view.welcome.set_model(model.name or model.id, server_url=model.path if model.server else "")
        elif self._loading_spec and (self.bridge.state in ("starting", EngineStatus.LOADING) or self._startup):
            self.chat_view.welcome.set_model(self._model_name(self._loading_spec), loading=True)
        else:
            self.chat_view.welcome.set_model("")

    # --- model tasks: import, add folder, download ----------------------
    def _on_task_progress(self, kind, p):
        dialog = self.dialogs.download
        if kind == "download" and dialog is not None:
            dialog.on_progress(p)
            return
        self.status.show_task_progress(p)

    def _on_task_finished(self, kind, info):
        dialog = self.dialogs.download
        if kind == "download" and dialog is not None:
            dialog.on_finished(info)
        self.status.hide_progress_unless_loading()
        verb = {"import": "Imported", "folder": "Added", "download": "Downloaded"}.get(kind, "Added")
        self.notices.show_notice(
            "model-task", f"{verb} {info.name or info.id}.", "info", ("Load It", lambda: self.load_model(info.id))
        )

    def _on_task_failed(self, kind, reason):
        dialog = self.dialogs.download
        self.status.hide_progress_unless_loading()
        if kind == "download" and dialog is not None:
            dialog.on_failed(reason)
            return  # said once: in the dialog that is open, not in a banner too
        what = {"import": "Import", "folder": "Adding the folder", "download": "Download"}.get(kind, kind)
        self.show_error(f"{what} failed: {reason}")

    # --- status ---------------------------------------------------------
    def _on_generating(self, on):
        self.stop_action.setEnabled(on or self.chat.editing is not None or bool(self.chat.queue))
        self.regen_action.setEnabled(not on)
        if not on and self.chat.last_status == MessageStatus.COMPLETE:
            self.notices.dismiss("error")  # a reply came through: an old error no longer applies

    def _on_conversation_changed(self, conv_id):
        title, prompt = "", None
        if conv_id:
            try:
                conv = self.store.get_conversation(conv_id)
                title, prompt = conv.title, (conv.settings or {}).get("system_prompt")
            except ChinwagError:
                pass
        self.setWindowTitle(f"{title} — Chinwag" if title else "Chinwag")
        self.header.set_title(title)
        self.header.set_custom_prompt(prompt)
        if is_unsaved(conv_id):
            self.status.show_stats(None)
        self._suggest_conversation_model()

    def _on_chat_settings_saved(self, conv_id):
        if conv_id == self.chat.conv_id:
            self._on_conversation_changed(conv_id)  # the header's system prompt marker
        self.read_ahead.reread(conv_id, INSTRUCTIONS)  # new instructions: read now, not on Enter

    def _suggest_conversation_model(self):
        """A chat that last used another model offers to switch back to it (never automatic)."""
        self.notices.dismiss("conv-model")
        conv_id, current = self.chat.conv_id, self.bridge.current_model
        if not conv_id or current is None:
            return
        try:
            wanted = self.store.get_conversation(conv_id).model_id
        except ChinwagError:
            return
        info = self.models.get(wanted)
        if info is None or wanted == current.id or info.status == ModelStatus.UNUSABLE:
            return
        name = info.name or info.id
        self.notices.show_notice(
            "conv-model",
            f"This chat last used {name}.",
            "info",
            (f"Switch to {name}", lambda: self.load_model(info.id)),
        )

    def escape(self):
        if not self.chat.stop():  # a reply, or the open chat's queued message
            self.chat.cancel_edit()

    def show_error(self, text):
        self.notices.show_notice("error", text, "error", timeout_ms=ERROR_BANNER_MS)
        self.status.showMessage(text.split("\n")[0][:200], 10000)

    def _offer_undo(self, conv_id, title):
        self.notices.show_notice(
            "undo",
            f"Deleted “{title}”.",
            "info",
            ("Undo", lambda: self.chat.undo_delete(conv_id)),
            timeout_ms=8000,
        )

    # --- closing --------------------------------------------------------
    def closeEvent(self, event):
        self.chat.save_draft()  # the unsent text of the open chat is there next time
        self.chat.abandon()
        if not self.store.read_only:
            try:
                self.store.set_state("window_geometry", bytes(self.saveGeometry().toBase64().data()).decode("ascii"))
            except ChinwagError:
                pass
        super().closeEvent(event)

    async def shutdown(self):
        """Close the engine (after the window closed); run it on the loop."""
        self.chat.abandon()
        await self.tools.close()  # stdio MCP servers end with the window
        await self.server_control.aclose()  # before the engine closes
        await self.bridge.aclose()
