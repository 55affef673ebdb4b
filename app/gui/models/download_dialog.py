"""The download dialog with a catalogue: curated MLX chat models (resources/catalogue.json)
with their approximate size, quantization, context, the kind of cache their architecture keeps
and whether they fit this machine, plus a Hugging Face search by name. Picking one fills the
repo id; Download works as before.

Fit is the engine's own verdict (CatalogueEntry.plan: the Plan that refuses a model before it
loads), against the memory limit the engine would use (Preferences › Memory limit, else what this
machine has available) and the KV cache setting the model would get. A model that does not fit is
greyed with the reason; like LM Studio, Download still works after a warning the user confirms."""

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.core.sizes import format_bytes
from app.gui.models.menu import DownloadDialog, sentence
from app.gui.settings import fit as fit_settings
from engine.errors import ChinwagError
from engine.models import fit
from engine.models.catalogue import (
    CatalogueEntry,
    load_catalogue,
    machine_ram_bytes,
    memory_bandwidth,
    runs_on_cpu,
    speed_text,
    tokens_per_second,
)
from engine.types import KVQuantization

REPO_ROLE = Qt.ItemDataRole.UserRole
# The catalogue's columns.
NAME, SIZE, QUANTIZATION, CONTEXT, CACHE, FIT = range(6)
CATALOGUE_HEADERS = ["Model", "Size", "Quantization", "Context", "Cache", "This machine"]


def _tokens(n: int) -> str:
    return f"{n // 1024}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def fit_options(values: dict[str, Any], loaded_weights: int) -> dict[str, Any]:
    """The dialog's fit arguments from the app settings (Preferences): the memory limit (a bad,
    hand-edited one: the default, as if unset) and each model's KV cache setting, as a load would get them."""

    def kv(repo: str) -> KVQuantization | None:
        try:
            return fit_settings.kv_setting(values, repo)
        except ChinwagError:
            return None

    try:
        limit = fit_settings.memory_limit(str(values.get("memory_limit", "")))
    except ChinwagError:
        limit = None
    return {"limit": limit, "kv": kv, "loaded_weights": loaded_weights}


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

    def __init__(
        self,
        parent=None,
        ram_bytes=None,
        installed=(),
        bandwidth=None,
        cpu=None,
        limit: int | None = None,
        kv: Callable[[str], KVQuantization | None] | None = None,
        loaded_weights: int = 0,
    ):
        """`limit`: the memory limit setting in bytes (None: what this machine has available plus the
        `loaded_weights` a load would replace, as the engine takes it); `kv`: the KV cache setting a
        model would load with, by its id (a repo)."""
        super().__init__(parent)
        self.ram_bytes = machine_ram_bytes() if ram_bytes is None else ram_bytes
        self.bandwidth = memory_bandwidth() if bandwidth is None else bandwidth  # bytes/s, measured once
        cpu = runs_on_cpu() if cpu is None else cpu
        self.limit_given = limit is not None
        self.limit = fit.default_limit(loaded_weights) if limit is None else limit  # read once: every row judged alike
        self.kv = kv or (lambda _repo: None)
        self.too_big: dict[str, str] = {}  # repo -> why it does not fit (asked before downloading)
        self.confirm: QMessageBox | None = None  # the "download anyway?" question while open
        self._fit_note = ""  # the message a picked row that does not fit put there
        self.installed = set(installed)  # registry ids already here (a download's id is its repo)
        layout = self.layout()
        assert isinstance(layout, QVBoxLayout)  # DownloadDialog's column
        where = "Preferences › Memory limit" if self.limit_given else "what this machine has available now"
        self.intro = intro = QLabel(
            f"Pick a model (sizes are approximate; models may use {fit.size_text(self.limit)} here: {where}),"
            " or search Hugging Face by name."
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
        kv = self.kv(entry.repo)
        plan = entry.plan(self.limit, kv)
        why = plan.reason(kv, fit_settings.SETTINGS)
        speed = speed_text(tokens_per_second(entry, self.bandwidth, self.ram_bytes, cpu))
        verdict = "Does not fit" if why else "Fits" + (f" · {speed}" if speed else "")
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
        item.setToolTip(FIT, sentence(why) if why else self._fit_tip(plan, speed))
        if why:
            self.too_big[entry.repo] = why
            for column in range(len(CATALOGUE_HEADERS)):
                item.setForeground(column, self.palette().placeholderText())
        return item

    def _fit_tip(self, plan: fit.Plan, speed: str) -> str:
        tokens = min(plan.longest_context, 1 << 30)
        tip = (
            f"needs about {fit.size_text(plan.needs(fit.MINIMAL_CHAT_TOKENS))} here (weights"
            f" {fit.size_text(plan.weights)} as they load here and a {_tokens(fit.MINIMAL_CHAT_TOKENS)}-token chat);"
            f" models may use {fit.size_text(plan.limit)}, which holds about {_tokens(tokens)} tokens of chat"
        )
        if speed:
            tip += (
                f"\nspeed: each token reads all the weights it uses once; this machine moves about "
                f"{self.bandwidth / 1e9:.0f} GB/s (expect less while it is busy)"
            )
        return tip

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
        repo = item.data(0, REPO_ROLE)
        self.repo.setText(repo)
        why = self.too_big.get(repo) if item.treeWidget() is self.catalogue else None
        note = sentence(why) + " You can still download it." if why else ""
        if note or self.message.text() == self._fit_note:  # replace only a row's own note
            self.message.setText(note)
        self._fit_note = note
        if start:
            self._start()

    def _start(self):
        """Download; a catalogue model that does not fit asks first (the reason, and Download anyway)."""
        why = self.too_big.get(self.repo.text().strip())
        if not why or self.running:
            super()._start()
            return
        if self.confirm is not None:
            return  # already asking
        box = QMessageBox(QMessageBox.Icon.Warning, "Model does not fit", sentence(why), parent=self)
        box.setObjectName("fitWarning")
        box.setInformativeText("Download it anyway? It will be refused when you load it unless you change the setting.")
        box.addButton("Download Anyway", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.finished.connect(lambda _result: self._confirmed(box))
        self.confirm = box
        box.open()

    def _confirmed(self, box: QMessageBox) -> None:
        self.confirm = None
        if box.buttonRole(box.clickedButton()) == QMessageBox.ButtonRole.AcceptRole:
            super()._start()

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
