"""Downloads against a local stand-in for the Hugging Face Hub (HF_ENDPOINT on 127.0.0.1)."""

import hashlib
import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest

from engine.errors import CancelledDownload, ChinwagError, ModelError
from engine.models import download, registry

SHA = "abcdef0123456789abcdef0123456789abcdef01"


class FakeHub(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), HubHandler)
        self.repos = {}  # repo id → {filename: bytes}
        self.chunk_delay = 0.0
        self.requests = []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class HubHandler(BaseHTTPRequestHandler):
    """The endpoints snapshot_download uses: model info, tree listing, resolve (HEAD/GET)."""

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        hub = self.server
        path = unquote(urlparse(self.path).path)
        hub.requests.append((self.command, path))
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/[^/]+)?", path)
        if m:
            return self._json(
                m.group(1),
                lambda files: {
                    "id": m.group(1),
                    "sha": SHA,
                    "private": False,
                    "siblings": [{"rfilename": f, "size": len(d)} for f, d in files.items()],
                },
            )
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/[^/]+", path)
        if m:
            return self._json(
                m.group(1),
                lambda files: [
                    {"type": "file", "path": f, "size": len(d), "oid": hashlib.sha1(d).hexdigest()}
                    for f, d in files.items()
                ],
            )
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/[^/]+/(.+)", path)
        files = hub.repos.get(m.group(1)) if m else None
        if files is None or m.group(2) not in files:
            return self._not_found()
        data = files[m.group(2)]
        self.send_response(200)
        self.send_header("X-Repo-Commit", SHA)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            for i in range(0, len(data), 16384):
                if hub.chunk_delay:
                    time.sleep(hub.chunk_delay)
                try:
                    self.wfile.write(data[i : i + 16384])
                except OSError:
                    return  # the client hung up (a cancelled download)

    def _json(self, repo, make):
        files = self.server.repos.get(repo)
        if files is None:
            return self._not_found()
        data = json.dumps(make(files)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self):
        data = b'{"error": "Repository not found"}'
        self.send_response(404)
        self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _online(monkeypatch, endpoint):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)


@pytest.fixture
def hub(monkeypatch, tiny_model_path):
    server = FakeHub()
    files = {f.name: f.read_bytes() for f in sorted(tiny_model_path.iterdir())}
    server.repos["tester/tiny"] = dict(files, **{"README.md": b"# tiny", "weights.bin": b"x" * 99})
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    _online(monkeypatch, server.url)
    yield server
    server.shutdown()
    server.server_close()


def _repo_dir(repo):
    return registry.hf_cache_dir() / ("models--" + repo.replace("/", "--"))


def test_download_success_with_progress(hub):
    events = []
    info = download.download_model("tester/tiny", progress=events.append)
    assert (info.id, info.source, info.status) == ("tester/tiny", "hf-cache", "ready")
    assert info.architecture == "llama"
    assert str(registry.hf_cache_dir()) in info.path
    files = hub.repos["tester/tiny"]
    wanted = sum(len(d) for f, d in files.items() if f not in ("README.md", "weights.bin"))
    assert events[-1].done == events[-1].total == wanted
    assert [e.done for e in events] == sorted(e.done for e in events)
    assert all(e.stage == "Downloading tester/tiny" for e in events)
    listed = {m.id: m for m in registry.list_models()}["tester/tiny"]
    assert listed.status == "ready" and listed.path == info.path
    assert not (_repo_dir("tester/tiny") / "snapshots" / SHA / "README.md").exists()
    # Downloading again reuses the cache.
    assert download.download_model("tester/tiny") == info


@pytest.mark.timing
def test_cancel_leaves_nothing_listed(hub, monkeypatch):
    monkeypatch.setattr(download, "CHUNK_SIZE", 16384)
    monkeypatch.setattr(download, "PROGRESS_INTERVAL_S", 0.0)
    hub.chunk_delay = 0.05
    cancel = threading.Event()

    def progress(p):
        if p.done > 0:
            cancel.set()

    start = time.monotonic()
    with pytest.raises(CancelledDownload, match="tester/tiny"):
        download.download_model("tester/tiny", progress=progress, cancel=cancel)
    assert time.monotonic() - start < 10
    assert ("GET", "/tester/tiny/resolve/" + SHA + "/model.safetensors") in hub.requests
    assert not _repo_dir("tester/tiny").exists()
    assert "tester/tiny" not in {m.id for m in registry.list_models()}


def test_cancel_before_start(hub):
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledDownload):
        download.download_model("tester/tiny", cancel=cancel)
    assert not _repo_dir("tester/tiny").exists()


@pytest.mark.timing
def test_unreachable_hub_is_a_quick_clear_error(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again when the block ends: nothing listens
    _online(monkeypatch, f"http://127.0.0.1:{port}")
    start = time.monotonic()
    with pytest.raises(ChinwagError) as err:
        download.download_model("tester/tiny")
    assert time.monotonic() - start < 10
    msg = str(err.value)
    assert msg == "could not reach 127.0.0.1 to download tester/tiny: nothing answered there (connection refused)"
    assert not _repo_dir("tester/tiny").exists()


@pytest.mark.timing
def test_no_network_says_so_in_words(monkeypatch):
    """Offline, every name lookup fails: an unresolvable .invalid host (RFC 6761) does the same at once."""
    _online(monkeypatch, "http://hub.invalid")
    start = time.monotonic()
    with pytest.raises(ChinwagError) as err:
        download.download_model("tester/tiny")
    assert time.monotonic() - start < 30
    assert str(err.value) == (
        "could not reach hub.invalid to download tester/tiny: no network connection (name lookup failed)"
    )
    assert not _repo_dir("tester/tiny").exists()
    with pytest.raises(ChinwagError) as err:
        download.search_models("qwen")
    assert (
        str(err.value) == "could not reach hub.invalid to search for 'qwen': no network connection (name lookup failed)"
    )


def test_offline_mode_is_a_clear_error():
    # conftest sets HF_HUB_OFFLINE=1.
    with pytest.raises(ChinwagError, match="cannot reach Hugging Face to download a/b: offline"):
        download.download_model("a/b")


@pytest.mark.parametrize("bad", ["", "not a repo", "a/b/c", "a//b", "-a/b", "a--b/c", "../x"])
def test_invalid_repo_id(bad):
    with pytest.raises(ChinwagError, match="invalid Hugging Face model id"):
        download.download_model(bad)


def test_repo_id_from_url():
    assert download.normalize_repo_id("https://huggingface.co/mlx-community/Foo-4bit") == "mlx-community/Foo-4bit"
    assert download.normalize_repo_id(" hf.co/a/b/tree/main ") == "a/b"


def test_unknown_repo(hub):
    with pytest.raises(ChinwagError, match="no model tester/missing on Hugging Face"):
        download.download_model("tester/missing")


def test_unsupported_model_is_refused_before_the_weights(hub):
    config = json.loads(hub.repos["tester/tiny"]["config.json"])
    hub.repos["tester/bert"] = dict(
        hub.repos["tester/tiny"], **{"config.json": json.dumps(dict(config, model_type="bert")).encode()}
    )
    with pytest.raises(ModelError, match="'bert' model"):
        download.download_model("tester/bert")
    assert not any("model.safetensors" in p for _, p in hub.requests)
    assert not _repo_dir("tester/bert").exists()


def test_gguf_repo_is_refused_with_a_hint(hub):
    hub.repos["tester/gguf"] = {"README.md": b"x", "model.Q4_0.gguf": b"GGUF"}
    with pytest.raises(ModelError, match="import"):
        download.download_model("tester/gguf")
