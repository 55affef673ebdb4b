"""The download dialog's catalogue and Hugging Face search, against the local stand-in Hub."""

import json
import socket
import threading
from urllib.parse import parse_qs, urlparse

import pytest

from engine.errors import ChinwagError
from engine.models import download, registry
from engine.models.catalogue import (
    bytes_per_token,
    fits,
    load_catalogue,
    memory_bandwidth,
    speed_text,
    tokens_per_second,
)
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


def test_catalogue_is_a_dozen_mlx_community_chat_models():
    entries = load_catalogue()
    assert len(entries) >= 12 and len({e.repo for e in entries}) == len(entries)
    for e in entries:
        assert e.repo.startswith("mlx-community/") and e.name and e.context >= 2048
        assert e.bits in (4, 6, 8, 16) and 0.1 < e.params_b < 200
        assert e.approx_size_bytes > 0
    sizes = [e.approx_size_bytes for e in entries]
    assert min(sizes) < 1e9 and max(sizes) > 20e9  # small to large
    small = next(e for e in entries if e.params_b < 1 and e.bits == 4)
    huge = max(entries, key=lambda e: e.approx_size_bytes)
    assert fits(small, 8 << 30) and not fits(huge, 8 << 30) and fits(huge, 256 << 30)
    assert fits(small, 0) is None  # memory unknown


def test_speed_estimate_reads_every_weight_once_per_token(monkeypatch):
    monkeypatch.delenv("CHINWAG_CPU_DEQUANTIZE", raising=False)
    by_repo = {e.repo: e for e in load_catalogue()}
    big = by_repo["mlx-community/Qwen2.5-14B-Instruct-4bit"]  # 14.7 B parameters, 4-bit
    bf16 = by_repo["mlx-community/SmolLM2-360M-Instruct"]  # 0.362 B, bf16
    small = by_repo["mlx-community/Qwen2.5-0.5B-Instruct-4bit"]  # 0.49 B, 4-bit
    gib = 1 << 30
    # CPU, quantized: 4 bits plus a float32 scale and bias per 64 weights (1 bit).
    assert bytes_per_token(big, 32 * gib) == int(14.7e9 * 5 / 8)
    assert tokens_per_second(big, 10e9, 32 * gib) == pytest.approx(10e9 / (14.7e9 * 5 / 8))
    assert speed_text(tokens_per_second(big, 10e9, 32 * gib)) == "about 1 token/s here"
    # bf16 runs as float32 on the CPU; a small quantized model too, once float32 fits in a tenth of memory.
    assert bytes_per_token(bf16, 8 * gib) == int(0.362e9 * 4)
    assert bytes_per_token(small, 8 * gib) == int(0.49e9 * 5 / 8)  # 1.96 GB float32 > 0.8 GB
    assert bytes_per_token(small, 32 * gib) == int(0.49e9 * 4)
    monkeypatch.setenv("CHINWAG_CPU_DEQUANTIZE", "0")
    assert bytes_per_token(small, 32 * gib) == int(0.49e9 * 5 / 8)
    # Metal reads the weights as downloaded.
    assert bytes_per_token(big, 32 * gib, cpu=False) == big.approx_size_bytes
    assert tokens_per_second(big, 0.0, 32 * gib) == 0.0 and speed_text(0.0) == ""
    assert speed_text(0.3) == "under 1 token/s here" and speed_text(3.4) == "about 3 tokens/s here"
    assert speed_text(250) == "over 100 tokens/s here"


def test_memory_bandwidth_is_measured_once():
    first = memory_bandwidth()
    assert 1e8 < first < 1e13  # between 0.1 GB/s and 10 TB/s
    assert memory_bandwidth() == first  # cached for the process


@pytest.mark.qt
def test_dialog_says_how_fast_a_model_that_fits_would_write(qtbot):
    from app.gui.models.download_dialog import REPO_ROLE, CatalogueDownloadDialog

    dialog = CatalogueDownloadDialog(ram_bytes=32 << 30, bandwidth=10e9, cpu=True)
    qtbot.addWidget(dialog)
    rows = [dialog.catalogue.topLevelItem(i) for i in range(dialog.catalogue.topLevelItemCount())]
    by_repo = {r.data(0, REPO_ROLE): r for r in rows}
    big = by_repo["mlx-community/Qwen2.5-14B-Instruct-4bit"]
    assert big.text(4) == "Fits · about 1 token/s here"
    assert "10 GB/s" in big.toolTip(4)
    assert by_repo["mlx-community/SmolLM2-360M-Instruct"].text(4) == "Fits · about 7 tokens/s here"
    assert by_repo["mlx-community/Llama-3.3-70B-Instruct-4bit"].text(4) == "Too large"


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
    from app.gui.models.download_dialog import REPO_ROLE, CatalogueDownloadDialog

    dialog = CatalogueDownloadDialog(ram_bytes=8 << 30, installed=["mlx-community/Llama-3.2-1B-Instruct-4bit"])
    qtbot.addWidget(dialog)
    rows = [dialog.catalogue.topLevelItem(i) for i in range(dialog.catalogue.topLevelItemCount())]
    assert len(rows) == len(load_catalogue())
    by_repo = {r.data(0, REPO_ROLE): r for r in rows}
    small = by_repo["mlx-community/Qwen2.5-0.5B-Instruct-4bit"]
    assert small.text(1).startswith("≈ ") and small.text(2) == "4-bit" and small.text(3) == "32K"
    assert small.text(4).startswith("Fits")
    assert by_repo["mlx-community/Llama-3.3-70B-Instruct-4bit"].text(4) == "Too large"
    have = by_repo["mlx-community/Llama-3.2-1B-Instruct-4bit"]
    assert have.text(0).endswith(" ✓") and have.text(4) == "Downloaded"
    dialog.catalogue.setCurrentItem(small)
    assert dialog.repo.text() == "mlx-community/Qwen2.5-0.5B-Instruct-4bit"
    with qtbot.waitSignal(dialog.downloadRequested) as sig:
        dialog.catalogue.itemActivated.emit(small, 0)
    assert sig.args == ["mlx-community/Qwen2.5-0.5B-Instruct-4bit"] and dialog.running


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
