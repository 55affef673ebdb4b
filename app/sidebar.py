"""The conversation list: search, new, rename (in place), delete (the window offers Undo)."""

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

ID_ROLE = Qt.ItemDataRole.UserRole


class Sidebar(QWidget):
    conversationSelected = Signal(object)
    newRequested = Signal()
    renameRequested = Signal(object, str)
    deleteRequested = Signal(object)
    searchChanged = Signal(str)

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("sidebar")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 8, 8)
        layout.setSpacing(6)
        top = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setObjectName("searchBox")
        self.search.setPlaceholderText("Search chats")
        self.search.setClearButtonEnabled(True)
        top.addWidget(self.search, 1)
        self.new_button = QPushButton("New")
        self.new_button.setObjectName("newChatButton")
        self.new_button.setToolTip("New chat")
        self.new_button.clicked.connect(self.newRequested)
        top.addWidget(self.new_button)
        layout.addLayout(top)
        self.list = QListWidget()
        self.list.setObjectName("conversationList")
        self.list.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._context_menu)
        self.list.currentItemChanged.connect(self._on_current)
        self.list.itemChanged.connect(self._on_item_changed)
        self.list.setWordWrap(False)
        self.list.setUniformItemSizes(True)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        layout.addWidget(self.list, 1)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(150)
        self._debounce.timeout.connect(lambda: self.searchChanged.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._debounce.start())
        self._filling = False

    def set_conversations(self, summaries, current_id=None):
        """Fill the list (already sorted newest activity first by the store)."""
        self._filling = True
        self.list.clear()
        for s in summaries:
            item = QListWidgetItem(s.title or "Untitled")
            item.setData(ID_ROLE, s.id)
            snippet = getattr(s, "snippet", "")
            item.setToolTip(f"{s.title}\n{snippet}" if snippet and snippet != s.title else (s.title or ""))
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if s.id == current_id:
                self.list.setCurrentItem(item)
        self._filling = False

    def ids(self) -> list:
        return [self.list.item(i).data(ID_ROLE) for i in range(self.list.count())]

    def titles(self) -> list[str]:
        return [self.list.item(i).text() for i in range(self.list.count())]

    def select(self, conv_id):
        self._filling = True
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == conv_id:
                self.list.setCurrentRow(i)
        self._filling = False

    def start_rename(self, conv_id=None):
        item = self._item(conv_id) if conv_id is not None else self.list.currentItem()
        if item is not None:
            self.list.editItem(item)

    def focus_search(self):
        self.search.setFocus()
        self.search.selectAll()

    def _item(self, conv_id):
        for i in range(self.list.count()):
            if self.list.item(i).data(ID_ROLE) == conv_id:
                return self.list.item(i)
        return None

    def _on_current(self, current, _previous):
        if current is not None and not self._filling:
            self.conversationSelected.emit(current.data(ID_ROLE))

    def _on_item_changed(self, item):
        if self._filling:
            return
        title = " ".join(item.text().split())
        if title:
            self.renameRequested.emit(item.data(ID_ROLE), title)

    def _context_menu(self, pos):
        item = self.list.itemAt(pos)
        if item is None:
            return
        menu = QMenu(self)
        menu.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        conv_id = item.data(ID_ROLE)
        menu.addAction("Rename", lambda: self.list.editItem(item))
        menu.addAction("Delete", lambda: self.deleteRequested.emit(conv_id))
        menu.popup(self.list.viewport().mapToGlobal(pos))

    def keyPressEvent(self, event):
        if event.key() in (Qt.Key.Key_Delete, Qt.Key.Key_Backspace) and self.list.hasFocus():
            item = self.list.currentItem()
            if item is not None and self.list.state() != QAbstractItemView.State.EditingState:
                self.deleteRequested.emit(item.data(ID_ROLE))
                return
        super().keyPressEvent(event)
