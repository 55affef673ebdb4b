"""The download dialog's catalogue and Hugging Face search, against the local stand-in Hub."""

import json
import socket
import threading
from dataclasses import replace
from urllib.parse import parse_qs, urlparse

import pytest

from app.core.sizes import format_bytes
from engine.errors import ChinwagError
from engine.models import download, registry
from engine.models.catalogue import (
    CACHE_KINDS,
    CacheKind,
    bytes_per_token,
    estimated_size_bytes,
    load_catalogue,
    memory_bandwidth,
    speed_text,
    tokens_per_second,
)
from engine.models.folders import _model_remapping, supported_model_type
from tests.engine.models.test_download import FakeHub, HubHandler, _online


class SearchHandler(HubHandler):
    """The stand-in Hub plus GET /api/models?search=… (what HfApi.list_models calls)."""

    def _serve(self, body):
        url = urlparse(self.path)
        if url.path != "/api/models":
            return super()._serve(body)
        query = parse_qs(url.query)
        self.server.requests.append((self.command, self.path))
        needle = query.get("search", [""])[0].lower()
        found = [
            {"id": repo, "modelId": repo, "downloads": 100 - i, "likes": i, "tags": ["mlx"]}
            for i, repo in enumerate(sorted(self.server.repos))
            if needle in repo.lower()
        ]
        data = json.dumps(found).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)


@pytest.fixture
def hub(monkeypatch, tiny_model_path):
    server = FakeHub()
    server.RequestHandlerClass = SearchHandler
    files = {f.name: f.read_bytes() for f in sorted(tiny_model_path.iterdir())}
    server.repos["tester/tiny"] = files
    server.repos["mlx-community/Tiny-Chat-4bit"] = files
    server.repos["someone/other-model"] = files
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    _online(monkeypatch, server.url)
    yield server
    server.shutdown()
    server.server_close()


def test_catalogue_is_two_dozen_mlx_community_chat_models():
    entries = load_catalogue()
    assert len(entries) >= 20 and len({e.repo for e in entries}) == len(entries)
    for e in entries:
        assert e.repo.startswith("mlx-community/") and e.name and e.family and e.context >= 2048
        assert e.bits in (4, 6, 8, 16) and 0.1 < e.params_b < 200
        assert e.active_params_b is None or 0 < e.active_params_b < e.params_b
        # A listed size is the repo's files (a vision tower, the tokenizer): near the weights' estimate.
        estimate = estimated_size_bytes(e.params_b, e.bits)
        assert 0.8 * estimate < e.approx_size_bytes < 1.7 * estimate, e.repo
        assert not e.size_estimated or e.approx_size_bytes == estimate, e.repo
    sizes = [e.approx_size_bytes for e in entries]
    assert sizes == sorted(sizes)  # small to large
    assert min(sizes) < 1e9 and max(sizes) > 10e9
    small = next(e for e in entries if e.params_b < 1 and e.bits == 4)
    huge = max(entries, key=lambda e: e.approx_size_bytes)
    assert not small.plan(8 << 30, None).reason(None) and small.plan(8 << 30, None).longest_context > 8192
    assert huge.plan(8 << 30, None).reason(None) and not huge.plan(64 << 30, None).reason(None)


def test_every_entry_gives_the_figures_that_size_its_cache():
    for e in load_catalogue():
        plan = e.plan(64 << 30, None)
        assert plan.per_token > 0 and e.params_b * 1e9 * e.bits / 8 < plan.weights, e.repo
    by_repo = {e.repo: e for e in load_catalogue()}
    qwen, hybrid = by_repo["mlx-community/Qwen3-8B-4bit"], by_repo["mlx-community/Qwen3.5-9B-4bit"]
    # A hybrid's recurrent layers hold no cache per token: only its attention layers grow with the chat.
    assert hybrid.plan(64 << 30, None).per_token < qwen.plan(64 << 30, None).per_token / 4


def test_a_catalogue_entry_without_cache_figures_is_a_packaging_error(monkeypatch):
    import engine.models.catalogue as catalogue

    real = catalogue.CatalogueEntry

    def unsized(**m):
        return real(**{**m, "config": {}} if m["repo"] == "mlx-community/Qwen3-8B-4bit" else m)

    monkeypatch.setattr(catalogue, "CatalogueEntry", unsized)
    with pytest.raises(ChinwagError, match=r"no cache figures for \['mlx-community/Qwen3-8B-4bit'\]"):
        load_catalogue()


def test_every_architecture_is_one_mlx_lm_runs_and_has_a_cache_kind():
    entries = load_catalogue()
    for e in entries:
        assert supported_model_type(e.model_type), e.model_type
        assert isinstance(e.cache_kind, CacheKind)
    assert set(CACHE_KINDS) == {e.model_type for e in entries}  # the table names no architecture untested
    by_repo = {e.repo: e for e in entries}
    kinds = {
        "mlx-community/Llama-3.2-1B-Instruct-4bit": "attention",
        "mlx-community/gemma-3-1b-it-4bit": "sliding window",
        "mlx-community/gpt-oss-20b-MXFP4-Q8": "sliding window",
        "mlx-community/Qwen3.5-4B-4bit": "recurrent (hybrid)",
        "mlx-community/granite-4.0-h-tiny-4bit": "recurrent (hybrid)",
        "mlx-community/LFM2-1.2B-4bit": "recurrent (hybrid)",
        "mlx-community/GLM-4.7-Flash-4bit": "latent (MLA)",
    }
    assert {repo: by_repo[repo].cache_kind.value for repo in kinds} == kinds
    assert {k.value for k in CacheKind} == {"attention", "sliding window", "recurrent (hybrid)", "latent (MLA)"}
    assert all(k.explanation for k in CacheKind)
    assert by_repo["mlx-community/gpt-oss-20b-MXFP4-Q8"].quantization == "MXFP4"
    assert by_repo["mlx-community/Qwen3-8B-4bit"].quantization == "4-bit"


def test_a_catalogue_architecture_without_a_cache_kind_is_a_packaging_error(monkeypatch):
    monkeypatch.delitem(CACHE_KINDS, "lfm2")
    with pytest.raises(ChinwagError, match=r"unknown architectures: \['lfm2'\]"):
        load_catalogue()


# A catalogue architecture that mlx-lm serves with another one's module (mlx_lm.utils.MODEL_REMAPPING)
# is covered by that one's fixture. Only such true aliases: a different module needs its own fixture.
FIXTURE_ALIASES = {"mistral": "llama"}


def test_every_catalogue_architecture_has_a_tiny_fixture():
    from tests.tiny_families import FAMILIES

    assert all(_model_remapping().get(alias) == module for alias, module in FIXTURE_ALIASES.items())
    needed = {FIXTURE_ALIASES.get(e.model_type, e.model_type) for e in load_catalogue()}
    assert sorted(needed - set(FAMILIES)) == []


def test_speed_estimate_reads_every_weight_once_per_token(monkeypatch):
    monkeypatch.delenv("CHINWAG_CPU_DEQUANTIZE", raising=False)
    by_repo = {e.repo: e for e in load_catalogue()}
    big = by_repo["mlx-community/Mistral-Small-24B-Instruct-2501-4bit"]  # 23.6 B parameters, 4-bit
    small = by_repo["mlx-community/Qwen3-0.6B-4bit"]  # 0.6 B, 4-bit
    moe = by_repo["mlx-community/GLM-4.7-Flash-4bit"]  # 29.9 B, 3 B active
    bf16 = replace(small, bits=16, quantization="")  # none ships unquantized; the CPU path stays tested
    gib = 1 << 30
    # CPU, quantized: 4 bits plus a float32 scale and bias per 64 weights (1 bit).
    assert bytes_per_token(big, 32 * gib) == int(23.6e9 * 5 / 8)
    assert tokens_per_second(big, 10e9, 32 * gib) == pytest.approx(10e9 / (23.6e9 * 5 / 8))
    assert speed_text(tokens_per_second(big, 10e9, 32 * gib)) == "under 1 token/s here"
    # A mixture of experts reads its active parameters only.
    assert bytes_per_token(moe, 32 * gib) == int(3.0e9 * 5 / 8)
    # bf16 runs as float32 on the CPU; a small quantized model too, once float32 fits in a tenth of memory.
    assert bf16.quantization == "bf16" and bytes_per_token(bf16, 8 * gib) == int(0.6e9 * 4)
    assert bytes_per_token(small, 8 * gib) == int(0.6e9 * 5 / 8)  # 2.4 GB float32 > 0.8 GB
    assert bytes_per_token(small, 32 * gib) == int(0.6e9 * 4)
    monkeypatch.setenv("CHINWAG_CPU_DEQUANTIZE", "0")
    assert bytes_per_token(small, 32 * gib) == int(0.6e9 * 5 / 8)
    # Metal reads the weights as quantized: 4 bits and a bf16 scale and bias per 64.
    assert bytes_per_token(big, 32 * gib, cpu=False) == estimated_size_bytes(23.6, 4) == 13_275_000_000
    assert bytes_per_token(moe, 32 * gib, cpu=False) == estimated_size_bytes(3.0, 4)
    assert tokens_per_second(big, 0.0, 32 * gib) == 0.0 and speed_text(0.0) == ""
    assert speed_text(0.3) == "under 1 token/s here" and speed_text(3.4) == "about 3 tokens/s here"
    assert speed_text(250) == "over 100 tokens/s here"


def test_memory_bandwidth_is_measured_once():
    first = memory_bandwidth()
    assert 1e8 < first < 1e13  # between 0.1 GB/s and 10 TB/s
    assert memory_bandwidth() == first  # cached for the process


@pytest.mark.qt
def test_dialog_says_how_fast_a_model_that_fits_would_write(qtbot):
    from app.gui.models.download_dialog import FIT, REPO_ROLE, CatalogueDownloadDialog

    dialog = CatalogueDownloadDialog(ram_bytes=32 << 30, bandwidth=10e9, cpu=True, limit=32 << 30)
    qtbot.addWidget(dialog)
    rows = [dialog.catalogue.topLevelItem(i) for i in range(dialog.catalogue.topLevelItemCount())]
    by_repo = {r.data(0, REPO_ROLE): r for r in rows}
    big = by_repo["mlx-community/Mistral-Small-24B-Instruct-2501-4bit"]
    assert big.text(FIT) == "Fits · under 1 token/s here"  # 10 GB/s / 14.75 GB
    assert "10 GB/s" in big.toolTip(FIT)
    # 3 B of GLM-4.7-Flash's 29.9 B parameters are read per token: 10 GB/s / 1.875 GB.
    assert by_repo["mlx-community/GLM-4.7-Flash-4bit"].text(FIT) == "Fits · about 5 tokens/s here"
    assert by_repo["mlx-community/Qwen3-0.6B-4bit"].text(FIT) == "Fits · about 4 tokens/s here"  # float32
    small = CatalogueDownloadDialog(ram_bytes=8 << 30, bandwidth=10e9, cpu=True, limit=8 << 30)
    qtbot.addWidget(small)
    rows = [small.catalogue.topLevelItem(i) for i in range(small.catalogue.topLevelItemCount())]
    assert {r.data(0, REPO_ROLE): r.text(FIT) for r in rows}["mlx-community/GLM-4.7-Flash-4bit"] == "Does not fit"


@pytest.mark.qt
def test_each_catalogue_row_says_its_cache_kind(qtbot):
    from app.gui.models.download_dialog import CACHE, CATALOGUE_HEADERS, REPO_ROLE, SIZE, CatalogueDownloadDialog

    dialog = CatalogueDownloadDialog(ram_bytes=16 << 30, bandwidth=10e9, cpu=True)
    qtbot.addWidget(dialog)
    assert dialog.catalogue.headerItem().text(CACHE) == CATALOGUE_HEADERS[CACHE] == "Cache"
    rows = [dialog.catalogue.topLevelItem(i) for i in range(dialog.catalogue.topLevelItemCount())]
    entries = {e.repo: e for e in load_catalogue()}
    assert {r.data(0, REPO_ROLE) for r in rows} == set(entries)
    for row in rows:
        entry = entries[row.data(0, REPO_ROLE)]
        assert row.text(CACHE) == entry.cache_kind.value
        assert row.toolTip(CACHE) == f"{entry.model_type} architecture: {entry.cache_kind.explanation}"
    by_repo = {r.data(0, REPO_ROLE): r for r in rows}
    assert by_repo["mlx-community/GLM-4.7-Flash-4bit"].text(CACHE) == "latent (MLA)"
    assert by_repo["mlx-community/Qwen3.5-2B-4bit"].text(CACHE) == "recurrent (hybrid)"
    assert by_repo["mlx-community/gemma-4-e2b-it-4bit"].text(CACHE) == "sliding window"
    assert by_repo["mlx-community/SmolLM3-3B-4bit"].text(CACHE) == "attention"
    assert {r.text(CACHE) for r in rows} == {k.value for k in CacheKind}
    assert "as Hugging Face lists it" in by_repo["mlx-community/gemma-4-e2b-it-4bit"].toolTip(SIZE)
    assert "estimated from the parameter count" in by_repo["mlx-community/Qwen3-8B-4bit"].toolTip(SIZE)
    assert "3.6 billion of them read per token" in by_repo["mlx-community/gpt-oss-20b-MXFP4-Q8"].toolTip(SIZE)


def test_search_finds_mlx_models_by_name(hub):
    found = download.search_models("TINY")
    assert [m.repo for m in found] == ["mlx-community/Tiny-Chat-4bit", "tester/tiny"]
    assert found[0].downloads == 100
    sent = next(p for c, p in hub.requests if p.startswith("/api/models?"))
    params = parse_qs(urlparse(sent).query)
    assert params["search"] == ["TINY"] and params["filter"] == ["mlx"] and params["sort"] == ["downloads"]
    assert download.search_models("nothing-like-this") == []


def test_search_offline_or_unreachable_says_so(monkeypatch):
    # conftest sets HF_HUB_OFFLINE=1.
    with pytest.raises(ChinwagError, match="cannot search Hugging Face: offline mode is on"):
        download.search_models("qwen")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _online(monkeypatch, f"http://127.0.0.1:{port}")
    with pytest.raises(ChinwagError) as err:
        download.search_models("qwen")
    assert (
        str(err.value) == "could not reach 127.0.0.1 to search for 'qwen': nothing answered there (connection refused)"
    )
    with pytest.raises(ChinwagError, match="type part of a model name"):
        download.search_models("   ")


@pytest.mark.qt
def test_dialog_lists_the_catalogue_with_fit_and_picking_fills_the_repo(qtbot):
    from app.gui.models.download_dialog import (
        CONTEXT,
        FIT,
        NAME,
        QUANTIZATION,
        REPO_ROLE,
        SIZE,
        CatalogueDownloadDialog,
    )

    dialog = CatalogueDownloadDialog(
        ram_bytes=8 << 30, limit=8 << 30, installed=["mlx-community/Llama-3.2-1B-Instruct-4bit"]
    )
    qtbot.addWidget(dialog)
    rows = [dialog.catalogue.topLevelItem(i) for i in range(dialog.catalogue.topLevelItemCount())]
    assert len(rows) == len(load_catalogue())
    by_repo = {r.data(0, REPO_ROLE): r for r in rows}
    small = by_repo["mlx-community/Qwen3-0.6B-4bit"]
    assert small.text(SIZE) == "≈ " + format_bytes(337_500_000)
    assert small.text(QUANTIZATION) == "4-bit" and small.text(CONTEXT) == "32K"
    assert small.text(FIT).startswith("Fits")
    assert by_repo["mlx-community/GLM-4.7-Flash-4bit"].text(FIT) == "Does not fit"
    assert by_repo["mlx-community/gpt-oss-20b-MXFP4-Q8"].text(QUANTIZATION) == "MXFP4"
    have = by_repo["mlx-community/Llama-3.2-1B-Instruct-4bit"]
    assert have.text(NAME).endswith(" ✓") and have.text(FIT) == "Downloaded"
    dialog.catalogue.setCurrentItem(small)
    assert dialog.repo.text() == "mlx-community/Qwen3-0.6B-4bit"
    with qtbot.waitSignal(dialog.downloadRequested) as sig:
        dialog.catalogue.itemActivated.emit(small, 0)
    assert sig.args == ["mlx-community/Qwen3-0.6B-4bit"] and dialog.running


@pytest.mark.qt
def test_offline_search_in_the_window_says_so(qtbot, window, engine):
    dialog = window.dialogs.download_dialog()
    dialog.search.setText("qwen")
    dialog.search_button.click()
    qtbot.waitUntil(lambda: dialog.search_button.isEnabled(), timeout=5000)
    assert "offline" in dialog.message.text() and not dialog.results.isVisible()
    dialog.reject()


@pytest.mark.qt
def test_search_pick_and_download_from_the_stand_in_hub(qtbot, qloop, store, hub):
    """The real engine's download path: search, pick a result, download with progress."""
    from app.gui.window import MainWindow
    from engine.api import Engine
    from tests.app_helpers import dispose

    window = MainWindow(store, Engine())
    window.show()
    dialog = window.dialogs.download_dialog()
    dialog.search.setText("tiny")
    dialog.search_button.click()
    qtbot.waitUntil(lambda: dialog.results.topLevelItemCount() == 2, timeout=20_000)
    assert dialog.results.isVisible() and "2 MLX model(s)" in dialog.message.text()
    dialog.results.setCurrentItem(dialog.results.topLevelItem(1))
    assert dialog.repo.text() == "tester/tiny"
    progress = []
    window.bridge.taskProgress.connect(lambda kind, p: progress.append((kind, p.done, p.total)))
    dialog.start_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.message.text().startswith("Downloaded tiny"), dialog.message.text()
    assert progress and progress[-1][0] == "download" and progress[-1][1] == progress[-1][2] > 0
    assert "tester/tiny" in {m.id for m in registry.list_models()}
    dialog.reject()
    dispose(qtbot, window, None)


@pytest.mark.qt
def test_a_failed_download_is_said_once_in_the_open_dialog(qtbot, qloop, store, monkeypatch):
    """The real engine, no network: one sentence in the dialog, no banner; with the dialog closed, the banner."""
    from app.gui.window import MainWindow
    from engine.api import Engine
    from tests.app_helpers import dispose

    _online(monkeypatch, "http://hub.invalid")
    window = MainWindow(store, Engine())
    window.show()
    dialog = window.dialogs.download_dialog()
    dialog.repo.setText("mlx-community/Some-Model")
    dialog.start_button.click()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60_000)
    assert dialog.message.text() == (
        "Could not reach hub.invalid to download mlx-community/Some-Model: no network connection (name lookup failed)."
    )
    assert not [t for t in window.notices.texts() if "hub.invalid" in t]
    dialog.reject()
    window.bridge.download_model("mlx-community/Some-Model")
    qtbot.waitUntil(lambda: any("hub.invalid" in t for t in window.notices.texts()), timeout=60_000)
    assert [t for t in window.notices.texts() if "hub.invalid" in t] == [
        "Download failed: could not reach hub.invalid to download mlx-community/Some-Model: "
        "no network connection (name lookup failed)"
    ]
    dispose(qtbot, window, None)


@pytest.mark.qt
def test_the_dialog_opens_wide_enough_to_show_every_model_name_whole(qtbot):
    from app.gui.models.download_dialog import NAME, CatalogueDownloadDialog

    dialog = CatalogueDownloadDialog(ram_bytes=16 << 30, bandwidth=10e9, cpu=True)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.waitExposed(dialog)
    tree = dialog.catalogue
    assert tree.columnWidth(NAME) >= tree.sizeHintForColumn(NAME)  # no name elided
