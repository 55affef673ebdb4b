"""The conversation list: search, new, rename (in place), delete (the window offers Undo).

Titles are stored whole and elided only when drawn; while searching, each row shows where
it matched; the row of the chat that is writing a reply shows a spinner.
"""

from PySide6.QtCore import QEvent, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QVBoxLayout,
    QWidget,
)

from app.core.store import FORK_SUFFIX
from app.gui import tooltips

ID_ROLE = Qt.ItemDataRole.UserRole
SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 1
SPINNER = "◐◓◑◒"
SPINNER_MS = 150


def _around(snippet: str, needle: str, before: int = 12) -> str:
    """The snippet from the word a few characters before the match, so a narrow row still shows it."""
    at = snippet.casefold().find(needle.strip().casefold()) if needle.strip() else -1
    if at <= before:
        return snippet
    word = snippet.rfind(" ", 0, at) + 1  # where the matched word starts
    space = snippet.find(" ", at - before, word)
    start = space + 1 if space >= 0 else word
    return snippet if start <= 1 else "…" + snippet[start:].lstrip("…")


def elide_words(text: str, needle: str, metrics, width: int) -> str:
    """text cut after its last whole word that fits in width with "…" (Qt's eliding cuts mid-word);
    mid-word only when no whole word past the match fits."""
    if metrics.horizontalAdvance(text) <= width:
        return text
    at = text.casefold().find(needle.strip().casefold()) if needle.strip() else -1
    keep = at + len(needle.strip()) if at >= 0 else 1  # the match, or a first word, stays whole
    end = text.rfind(" ", keep, len(text))
    while end >= keep:
        cut = text[:end].rstrip(" ,;:.") + "…"
        if metrics.horizontalAdvance(cut) <= width:
            return cut
        end = text.rfind(" ", keep, end)
    return metrics.elidedText(text, Qt.TextElideMode.ElideRight, width)


def match_parts(text: str, needle: str) -> tuple[str, str, str]:
    """text cut around the first match of needle (any case): before, the match, after."""
    needle = needle.strip()
    at = text.casefold().find(needle.casefold()) if needle else -1
    if at < 0 or len(text.casefold()) != len(text):  # no match, or case folding moved the letters
        return text, "", ""
    return text[:at], text[at : at + len(needle)], text[at + len(needle) :]


def _draw_marked(painter, rect, text: str, needle: str, font):
    """Draw text left-aligned in rect with its match in bold (the search term shows where it is)."""
    from PySide6.QtGui import QFont, QFontMetrics

    before, match, after = match_parts(text, needle)
    flags = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
    if not match:
        painter.drawText(rect, flags, text)
        return
    bold = QFont(font)
    bold.setBold(True)
    x = rect.left()
    for part, part_font in ((before, font), (match, bold), (after, font)):
        painter.setFont(part_font)
        width = QFontMetrics(part_font).horizontalAdvance(part)
        painter.drawText(QRect(x, rect.top(), max(0, rect.right() - x + 1), rect.height()), flags, part)
        x += width
    painter.setFont(font)


def bold_extra(font, text: str, needle: str) -> int:
    """How much wider text's match is drawn in bold than measured: eliding leaves that room."""
    from PySide6.QtGui import QFont, QFontMetrics

    match = match_parts(text, needle)[1]
    if not match:
        return 0
    bold = QFont(font)
    bold.setBold(True)
    return max(0, QFontMetrics(bold).horizontalAdvance(match) - QFontMetrics(font).horizontalAdvance(match))


def elide_title(metrics, title: str, width: int) -> str:
    """The title elided to fit `width`, but a fork's "(fork 2)" stays whole: it tells the chats apart."""
    match = FORK_SUFFIX.search(title)
    if match is None or metrics.horizontalAdvance(title) <= width:
        return metrics.elidedText(title, Qt.TextElideMode.ElideRight, width)
    suffix = match.group(0)
    room = max(0, width - metrics.horizontalAdvance(suffix))
    return metrics.elidedText(title[: match.start()], Qt.TextElideMode.ElideRight, room) + suffix


class _RowDelegate(QStyledItemDelegate):
    """Title (elided to fit), a busy spinner, and the search snippet as a dimmed second line."""

    def __init__(self, sidebar):
        super().__init__(sidebar.list)
        self.sidebar = sidebar

    def sizeHint(self, option, index):
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            size.setHeight(size.height() + option.fontMetrics.lineSpacing())
        return QSize(size.width(), size.height())

    def paint(self, painter, option, index):
        snippet = index.data(SNIPPET_ROLE) or ""
        busy = index.data(ID_ROLE) == self.sidebar.generating_id
        self.initStyleOption(option, index)
        title = option.text
        option.text = ""
        style = option.widget.style() if option.widget else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, option, painter, option.widget)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        group = QPalette.ColorGroup.Normal
        text_role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        rect = option.rect.adjusted(8, 4, -8, -4)
        line = option.fontMetrics.lineSpacing()
        painter.save()
        if busy:
            mark = SPINNER[self.sidebar.spin_step % len(SPINNER)]
            painter.setPen(option.palette.color(group, text_role))
            width = option.fontMetrics.horizontalAdvance(mark + " ")
            painter.drawText(
                QRect(rect.right() - width, rect.top(), width, line),
                Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                mark,
            )
            rect.setRight(rect.right() - width - 4)
        painter.setPen(option.palette.color(group, text_role))
        shown = self.shown_title(title, option.fontMetrics, option.font, rect.width())
        top = QRect(rect.left(), rect.top(), rect.width(), line if snippet else rect.height())
        search = self.sidebar.search_text
        _draw_marked(painter, top, shown, search, option.font)
        if snippet:
            dim = option.palette.color(
                group, QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.PlaceholderText
            )
            painter.setPen(dim)
            below = QRect(rect.left(), rect.top() + line, rect.width(), line)
            shown = self.shown_snippet(snippet, option.fontMetrics, rect.width(), option.font)
            _draw_marked(painter, below, shown, search, option.font)
        painter.restore()

    def shown_title(self, title: str, metrics, font, width: int) -> str:
        """What a row shows of its title: elided to the row's width with its match drawn bold."""
        return elide_title(metrics, title, width - bold_extra(font, title, self.sidebar.search_text))

    def shown_snippet(self, snippet: str, metrics, width: int, font=None) -> str:
        """What a row shows of its snippet: from just before the match, elided to the row's width
        with the match drawn bold (in `font`, the list's by default)."""
        search = self.sidebar.search_text
        text = _around(snippet, search)
        room = width - bold_extra(font or self.sidebar.list.font(), text, search)
        return elide_words(text, search, metrics, room)


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
        self.search.installEventFilter(self)
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
        self.list.setItemDelegate(_RowDelegate(self))
        layout.addWidget(self.list, 1)
        self.no_match = QLabel()
        self.no_match.setObjectName("noMatch")
        self.no_match.setWordWrap(True)
        self.no_match.setAlignment(Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop)
        self.no_match.setVisible(False)
        layout.addWidget(self.no_match, 1)
        self.generating_id = None
        self.search_text = ""
        self.spin_step = 0
        self._spinner = QTimer(self)
        self._spinner.setInterval(SPINNER_MS)
        self._spinner.timeout.connect(self._spin)
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(150)
        self._debounce.timeout.connect(lambda: self.searchChanged.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._debounce.start())
        self._filling = False

    def set_conversations(self, summaries, current_id=None, search=""):
        """Fill the list (already sorted newest activity first by the store)."""
        self._filling = True
        self.list.clear()
        self.list.setUniformItemSizes(not search)
        self.search_text = search
        for s in summaries:
            item = QListWidgetItem(s.title or "Untitled")
            item.setData(ID_ROLE, s.id)
            snippet = getattr(s, "snippet", "")
            if search and snippet and snippet != s.title:
                item.setData(SNIPPET_ROLE, snippet)
            item.setToolTip(
                tooltips.plain(f"{s.title}\n{snippet}" if snippet and snippet != s.title else (s.title or ""))
            )
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsEditable)
            self.list.addItem(item)
            if s.id == current_id:
                self.list.setCurrentItem(item)
        self._filling = False
        empty = not summaries
        if search.strip():
            note = f"No chats match “{search.strip()}”."
        else:
            note = "No chats yet: the ones you start appear here."
        self.no_match.setText(note if empty else "")
        self.no_match.setVisible(empty)
        self.list.setVisible(not empty)

    def set_generating(self, conv_id):
        """Mark the row of the chat writing a reply (None: no chat is)."""
        self.generating_id = conv_id
        if conv_id is None:
            self._spinner.stop()
        elif not self._spinner.isActive():
            self._spinner.start()
        self.list.viewport().update()

    def _spin(self):
        self.spin_step += 1
        self.list.viewport().update()

    def snippets(self) -> list[str]:
        return [self.list.item(i).data(SNIPPET_ROLE) or "" for i in range(self.list.count())]

    def eventFilter(self, obj, event):
        if obj is self.search and self._search_key(event):
            return True
        return super().eventFilter(obj, event)

    def _search_key(self, event) -> bool:
        """The keys the search box answers itself (True: it took the event): Esc with text clears the
        search (not the window's Esc, Stop); Down (or Return) moves into the results."""
        if event.type() == QEvent.Type.ShortcutOverride:
            if event.key() == Qt.Key.Key_Escape and self.search.text():
                event.accept()
                return True
            return False
        if event.type() != QEvent.Type.KeyPress:
            return False
        if event.key() == Qt.Key.Key_Escape and self.search.text():
            self.search.clear()
            self._debounce.stop()
            self.searchChanged.emit("")  # the whole list again at once
            return True
        if event.key() == Qt.Key.Key_Down and self.list.count():
            self.list.setFocus()
            if self.list.currentRow() < 0:
                self.list.setCurrentRow(0)
            return True
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.list.count():
            item = self.list.currentItem() or self.list.item(0)
            self.list.setCurrentItem(item)
            self.list.itemActivated.emit(item)
            return True
        return False

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
