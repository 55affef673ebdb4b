"""The download dialog with a catalogue: curated MLX chat models (resources/catalogue.json)
with their approximate size, quantization, context, the kind of cache their architecture keeps
and whether they fit this machine, plus a Hugging Face search by name. Picking one fills the
repo id; Download works as before."""

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.core.sizes import format_bytes
from app.gui.models.menu import DownloadDialog, sentence
from engine.errors import ChinwagError
from engine.models.catalogue import (
    USABLE_RAM_FRACTION,
    CatalogueEntry,
    fits,
    load_catalogue,
    machine_ram_bytes,
    memory_bandwidth,
    runs_on_cpu,
    speed_text,
    tokens_per_second,
)

REPO_ROLE = Qt.ItemDataRole.UserRole
# The catalogue's columns.
NAME, SIZE, QUANTIZATION, CONTEXT, CACHE, FIT = range(6)
CATALOGUE_HEADERS = ["Model", "Size", "Quantization", "Context", "Cache", "This machine"]


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def _size_tip(entry: CatalogueEntry) -> str:
    params = f"about {entry.params_b:g} billion parameters at {entry.quantization}"
    if entry.active_params_b:
        params += f", {entry.active_params_b:g} billion of them read per token"
    source = (
        "estimated from the parameter count (no file listing found)"
        if entry.size_estimated
        else "the download's size as Hugging Face lists it"
    )
    return f"{params}; {source}"


class CatalogueDownloadDialog(DownloadDialog):
    searchRequested = Signal(str)

    def __init__(self, parent=None, ram_bytes=None, installed=(), bandwidth=None, cpu=None):
        super().__init__(parent)
        self.ram_bytes = machine_ram_bytes() if ram_bytes is None else ram_bytes
        self.bandwidth = memory_bandwidth() if bandwidth is None else bandwidth  # bytes/s, measured once
        cpu = runs_on_cpu() if cpu is None else cpu
        self.installed = set(installed)  # registry ids already here (a download's id is its repo)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)  # DownloadDialog's column
        ram = format_bytes(self.ram_bytes) if self.ram_bytes else "unknown"
        intro = QLabel(
            f"Pick a model (sizes are approximate; this machine has {ram} of memory), or search Hugging Face by name."
        )
        intro.setWordWrap(True)
        layout.insertWidget(0, intro)
        self.catalogue = self._tree(CATALOGUE_HEADERS)
        self.catalogue.setObjectName("catalogue")
        try:
            entries = load_catalogue()
        except ChinwagError as e:
            entries = []
            self.message.setText(str(e))
        for entry in entries:
            self.catalogue.addTopLevelItem(self._catalogue_item(entry, cpu))
        header = self.catalogue.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        for column in range(SIZE, self.catalogue.columnCount()):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        layout.insertWidget(1, self.catalogue, 1)
        row = QHBoxLayout()
        self.search = QLineEdit()
        self.search.setObjectName("hubSearch")
        self.search.setPlaceholderText("Search Hugging Face for MLX models, e.g. qwen 7b")
        self.search.returnPressed.connect(self._search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self._search)
        row.addWidget(self.search, 1)
        row.addWidget(self.search_button)
        layout.insertLayout(2, row)
        self.results = self._tree(["Hugging Face result", "Downloads", "Likes"])
        self.results.setObjectName("hubResults")
        self.results.setVisible(False)
        layout.insertWidget(3, self.results, 1)
        self._query = ""
        self.setMinimumSize(640, 520)
        self.resize(self._width_for_rows(), 560)

    def _catalogue_item(self, entry: CatalogueEntry, cpu: bool) -> QTreeWidgetItem:
        """One catalogue entry as a row: its size, quantization, context, cache, and whether it fits here."""
        ok = fits(entry, self.ram_bytes)
        verdict = "Fits" if ok else ("Too large" if ok is False else "Unknown")
        speed = speed_text(tokens_per_second(entry, self.bandwidth, self.ram_bytes, cpu))
        if ok is not False and speed:
            verdict += f" · {speed}"
        have = entry.repo in self.installed
        item = QTreeWidgetItem(
            [
                entry.name + (" ✓" if have else ""),
                "≈ " + format_bytes(entry.approx_size_bytes),
                entry.quantization,
                _tokens(entry.context),
                entry.cache_kind.value,
                "Downloaded" if have else verdict,
            ]
        )
        item.setData(NAME, REPO_ROLE, entry.repo)
        item.setToolTip(NAME, f"{entry.repo}\n{entry.note}" if entry.note else entry.repo)
        item.setToolTip(SIZE, _size_tip(entry))
        item.setToolTip(CACHE, f"{entry.model_type} architecture: {entry.cache_kind.explanation}")
        item.setToolTip(
            FIT,
            f"needs about {format_bytes(entry.approx_memory_bytes)} to run; models may use "
            f"up to {USABLE_RAM_FRACTION:.0%} of this machine's memory"
            + (
                f"\nspeed: each token reads all the weights it uses once; this machine moves about "
                f"{self.bandwidth / 1e9:.0f} GB/s (expect less while it is busy)"
                if speed
                else ""
            ),
        )
        if ok is False:
            item.setForeground(FIT, self.palette().placeholderText())
        return item

    def _width_for_rows(self) -> int:
        """Wide enough that every column, model names included, shows whole (within the screen)."""
        tree = self.catalogue
        columns = sum(
            max(tree.sizeHintForColumn(c), tree.header().sectionSizeHint(c)) for c in range(tree.columnCount())
        )
        wanted = columns + tree.verticalScrollBar().sizeHint().width() + 4 * tree.frameWidth() + 48
        screen = self.screen().availableGeometry().width() if self.screen() is not None else wanted
        return max(640, min(wanted, screen - 40))

    def _tree(self, headers) -> QTreeWidget:
        tree = QTreeWidget()
        tree.setHeaderLabels(headers)
        tree.setRootIsDecorated(False)
        tree.setUniformRowHeights(True)
        tree.setAlternatingRowColors(True)
        tree.currentItemChanged.connect(lambda item, _prev: self._pick(item))
        tree.itemActivated.connect(lambda item, _col: self._pick(item, start=True))
        return tree

    def _pick(self, item, start=False):
        if item is None or self.running:
            return
        self.repo.setText(item.data(0, REPO_ROLE))
        if start:
            self._start()

    def _search(self):
        query = " ".join(self.search.text().split())
        if not query:
            self.message.setText("Type part of a model name to search Hugging Face.")
            return
        self._query = query
        self.search_button.setEnabled(False)
        self.message.setText(f"Searching Hugging Face for {query}…")
        self.searchRequested.emit(query)

    def on_search_results(self, query: str, models: list):
        if query != self._query:
            return  # an older search answered late
        self.search_button.setEnabled(True)
        self.results.clear()
        for m in models:
            item = QTreeWidgetItem(
                [m.repo + (" ✓" if m.repo in self.installed else ""), f"{m.downloads:,}", f"{m.likes:,}"]
            )
            item.setData(0, REPO_ROLE, m.repo)
            self.results.addTopLevelItem(item)
        self.results.setVisible(True)
        self.message.setText(
            f"{len(models)} MLX model(s) on Hugging Face match {query}."
            if models
            else f"No MLX model on Hugging Face matches {query}."
        )

    def on_search_failed(self, query: str, reason: str):
        if query != self._query:
            return
        self.search_button.setEnabled(True)
        self.message.setText(sentence(reason))
