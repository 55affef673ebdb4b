"""Download an MLX model from the Hugging Face Hub into the HF cache, with progress and cancel.

huggingface_hub is imported lazily: importing this module is cheap.
"""

import os
import re
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Callable
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from engine.atomic import write_atomic
from engine.errors import CancelledDownload, ChinwagError, ModelError
from engine.models.folders import inspect_mlx_folder
from engine.types import HubModel, LoadProgress, ModelInfo, ModelStatus

ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
    "*.py",
]
# Smaller than huggingface_hub's 10 MB so cancel and progress react within ~1 MB.
CHUNK_SIZE = 1 << 20
PROGRESS_INTERVAL_S = 0.1

_REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?$")
_NETWORK_ERRORS = {
    "ConnectError",
    "ConnectTimeout",
    "TimeoutException",
    "TransportError",
    "NetworkError",
    "ConnectionError",
    "TimeoutError",
    "OfflineModeIsEnabled",
    "LocalEntryNotFoundError",
    "ProxyError",
    "RemoteProtocolError",
    "ReadTimeout",
}


def normalize_repo_id(text: str) -> str:
    """'owner/name' from a repo id or a huggingface.co URL; ChinwagError if it cannot be one."""
    repo = str(text or "").strip()
    m = re.match(r"^(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/(.+)$", repo)
    if m:
        repo = "/".join(m.group(1).split("/")[:2])
    repo = repo.strip("/")
    if not _REPO_RE.match(repo) or "--" in repo or ".." in repo or repo.endswith((".", "-")):
        raise ChinwagError(
            f"invalid Hugging Face model id '{text}': expected owner/name, "
            "e.g. mlx-community/SmolLM2-135M-Instruct-8bit"
        )
    return repo


def download_model(
    repo_id: str, progress: Callable[[LoadProgress], None] | None = None, cancel: threading.Event | None = None
) -> ModelInfo:
    """Download an MLX (safetensors) model repo into the Hugging Face cache; its registry entry.

    Raises CancelledDownload when `cancel` is set (nothing half-downloaded stays listed),
    ChinwagError when the Hub cannot be reached or refuses, ModelError when the repo is
    not a model mlx-lm can run (checked before the weights are fetched).
    """
    repo = normalize_repo_id(repo_id)
    cancel = cancel or threading.Event()
    report = _Reporter(progress, f"Downloading {repo}")
    report.send(0, 0, force=True)

    from huggingface_hub import constants

    from engine.models import registry

    if _offline(constants):
        raise ChinwagError(f"cannot reach Hugging Face to download {repo}: offline mode is on (HF_HUB_OFFLINE=1)")
    constants.DOWNLOAD_CHUNK_SIZE = CHUNK_SIZE
    cache = registry.hf_cache_dir()
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    existed = repo_dir.exists()
    snapshot, snapshot_existed = None, True
    try:
        sha, files = _list_files(repo)
        snapshot = repo_dir / "snapshots" / sha
        snapshot_existed = snapshot.exists()
        _check_files(repo, files)
        _check_cancel(cancel, repo)
        _check_config(repo, sha, cache)
        total = sum(size for name, size in files if _wanted(name))
        report.total = total
        path = _snapshot(repo, sha, cache, report, cancel)
        _check_cancel(cancel, repo)
        _write_ref(repo_dir, sha)
    except BaseException as e:
        _cleanup(repo_dir, existed, snapshot, snapshot_existed)
        error = _user_error(e, repo)
        if error is e:
            raise
        raise error from e
    report.send(report.total, report.total, force=True)
    info = inspect_mlx_folder(Path(path), id=repo, name=repo.split("/")[-1], source="hf-cache")
    if info.status != ModelStatus.READY:
        raise ModelError(f"downloaded {repo} but it cannot be used ({info.reason}): {path}")
    return info


SEARCH_LIMIT = 30
SEARCH_TIMEOUT_S = 10


def search_models(query: str, limit: int = SEARCH_LIMIT) -> list[HubModel]:
    """MLX models on the Hub whose id contains query, most downloaded first."""
    query = " ".join(str(query or "").split())
    if not query or len(query) > 96:
        raise ChinwagError("type part of a model name to search Hugging Face (at most 96 characters)")
    from huggingface_hub import constants
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    if _offline(constants):
        raise ChinwagError("cannot search Hugging Face: offline mode is on (HF_HUB_OFFLINE=1)")
    try:
        # One request (HfApi.list_models retries for ~20 s when offline): the Hub's model
        # list API, as list_models(search=, filter="mlx", sort="downloads", limit=) sends it.
        response = get_session().get(
            f"{_endpoint() or constants.ENDPOINT}/api/models",
            params={"search": query, "filter": "mlx", "sort": "downloads", "limit": limit},
            headers=build_hf_headers(),
            timeout=SEARCH_TIMEOUT_S,
        )
        hf_raise_for_status(response)
        return _hub_models(response.json())
    except ValueError as e:  # not JSON, or odd numbers
        raise ChinwagError(f"Hugging Face sent an unreadable answer to the search for {query!r}") from e
    except Exception as e:  # huggingface_hub/httpx raise many kinds; all become one line
        error = _search_error(e, query)
        if error is None:
            raise
        raise error from e


def _hub_models(found: Any) -> list[HubModel]:
    """The models in the Hub's answer (a JSON list of objects with an id)."""
    return [
        HubModel(str(m["id"]), int(m.get("downloads") or 0), int(m.get("likes") or 0))
        for m in found
        if isinstance(m, dict) and m.get("id")
    ]


def _search_error(e: Exception, query: str) -> ChinwagError | None:
    """A search's network error or the Hub's refusal as one line; None for anything else (a bug)."""
    names = {c.__name__ for c in type(e).__mro__}
    if names & _NETWORK_ERRORS:
        return ChinwagError(f"could not reach {hub_host()} to search for {query!r}: {network_reason(e)}")
    if "HfHubHTTPError" in names:
        detail = " ".join(str(e).split())[:200] or type(e).__name__
        return ChinwagError(f"Hugging Face refused the search for {query!r}: {detail}")
    return None


def hub_host() -> str:
    """The Hub's host name, as the user knows it (huggingface.co unless HF_ENDPOINT says otherwise)."""
    from huggingface_hub import constants

    url = _endpoint() or constants.ENDPOINT
    return urlsplit(url).hostname or url


# (exception type, what it means) and the same read from a message when the chain is lost.
_CAUSES = (
    (socket.gaierror, "no network connection (name lookup failed)"),
    (ConnectionRefusedError, "nothing answered there (connection refused)"),
    (ssl.SSLError, "the secure connection failed"),
    (TimeoutError, "it did not answer in time"),
)
_CAUSE_TEXTS = (
    (r"name or service not known|name resolution|nodename nor servname|getaddrinfo", _CAUSES[0][1]),
    (r"connection refused", _CAUSES[1][1]),
    (r"ssl|certificate", _CAUSES[2][1]),
    (r"timed? ?out", _CAUSES[3][1]),
)


def network_reason(e: BaseException) -> str:
    """Why a connection failed, in words: the socket error under huggingface_hub's and httpx's
    wrappers, never a raw "[Errno -2]"."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        for kind, words in _CAUSES:
            if isinstance(x, kind):
                return words
        stack += [c for c in (x.__cause__, x.__context__, getattr(x, "reason", None)) if isinstance(c, BaseException)]
        stack += [a for a in getattr(x, "args", ()) if isinstance(a, BaseException)]
    text = " ".join(str(e).split())
    for pattern, words in _CAUSE_TEXTS:
        if re.search(pattern, text, re.I):
            return words
    return re.sub(r"\[Errno -?\d+\]\s*", "", text)[:200] or "the connection failed"


def _offline(constants: Any) -> bool:  # huggingface_hub.constants
    fn = getattr(constants, "is_offline_mode", None)
    return bool(fn() if callable(fn) else getattr(constants, "HF_HUB_OFFLINE", False))


def _endpoint() -> str | None:
    # Read now, not at huggingface_hub import time, so HF_ENDPOINT can change at runtime.
    return (os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None


def _list_files(repo: str) -> tuple[str, list[tuple[str, int]]]:
    """(commit sha, [(filename, size)]) of the repo's default branch."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=_endpoint()).model_info(repo, files_metadata=True)
    files = [(s.rfilename, s.size or 0) for s in (info.siblings or [])]
    return cast(str, info.sha), files  # a model_info from the Hub always names its commit


def _wanted(name: str) -> bool:
    return any(fnmatch(name, p) for p in ALLOW_PATTERNS)


def _check_files(repo: str, files: list[tuple[str, int]]) -> None:
    names = {n for n, _ in files}
    if not any(n.endswith(".safetensors") for n in names):
        hint = " (it has .gguf files: download one and import it)" if any(n.endswith(".gguf") for n in names) else ""
        raise ModelError(f"{repo} has no .safetensors weights, so MLX cannot run it{hint}")
    if "config.json" not in names:
        raise ModelError(f"{repo} has no config.json, so it is not an MLX model repo")


def _check_config(repo: str, sha: str, cache: Path) -> None:
    """Fetch config.json alone first: refuse an unsupported model before downloading GBs."""
    import json

    from huggingface_hub import hf_hub_download

    from engine.models.folders import supported_model_type

    path = hf_hub_download(repo, "config.json", revision=sha, cache_dir=str(cache), endpoint=_endpoint())
    try:
        model_type = json.loads(Path(path).read_text()).get("model_type")
    except (OSError, ValueError, RecursionError, AttributeError) as e:
        raise ModelError(f"{repo} has a corrupt config.json") from e
    if not supported_model_type(model_type):
        raise ModelError(f"{repo} is a '{model_type}' model, which mlx-lm cannot run")


def _snapshot(repo: str, sha: str, cache: Path, report: "_Reporter", cancel: threading.Event) -> str:
    from huggingface_hub import snapshot_download

    return snapshot_download(
        repo,
        revision=sha,
        cache_dir=str(cache),
        endpoint=_endpoint(),
        allow_patterns=ALLOW_PATTERNS,
        tqdm_class=_tqdm_class(report, cancel),
    )


def _write_ref(repo_dir: Path, sha: str) -> None:
    """refs/main → sha, so the registry picks this snapshot (we downloaded by commit)."""
    ref = repo_dir / "refs" / "main"
    ref.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(ref, sha)


def _check_cancel(cancel: threading.Event, repo: str) -> None:
    if cancel.is_set():
        raise CancelledDownload(f"download of {repo} cancelled")


def _cleanup(repo_dir: Path, existed: bool, snapshot: Path | None, snapshot_existed: bool) -> None:
    """Remove what this download added, so no half model shows up in the registry."""
    if not existed:
        shutil.rmtree(repo_dir, ignore_errors=True)
        return
    if snapshot is not None and not snapshot_existed:
        shutil.rmtree(snapshot, ignore_errors=True)
    for partial in (repo_dir / "blobs").glob("*.incomplete"):
        partial.unlink(missing_ok=True)


def _user_error(e: BaseException, repo: str) -> BaseException:
    """One-line ChinwagError for whatever huggingface_hub raised."""
    if isinstance(e, ChinwagError) or not isinstance(e, Exception):
        return e
    names = {c.__name__ for c in type(e).__mro__}
    detail = " ".join(str(e).split())[:200] or type(e).__name__
    if "GatedRepoError" in names:
        return ChinwagError(
            f"{repo} is gated: accept its terms on huggingface.co and log in with `hf auth login` first"
        )
    if "RepositoryNotFoundError" in names:
        return ChinwagError(f"no model {repo} on Hugging Face (or it is private)")
    if "RevisionNotFoundError" in names:
        return ChinwagError(f"{repo} has no main branch on Hugging Face")
    if names & _NETWORK_ERRORS:
        return ChinwagError(f"could not reach {hub_host()} to download {repo}: {network_reason(e)}")
    if "HfHubHTTPError" in names:
        return ChinwagError(f"Hugging Face refused the download of {repo}: {detail}")
    if isinstance(e, OSError):
        return ChinwagError(f"cannot save {repo} to the Hugging Face cache: {detail}")
    if type(e).__module__.split(".")[0] in ("huggingface_hub", "requests", "httpx", "urllib3"):
        return ChinwagError(f"download of {repo} failed: {detail}")
    return e  # anything else is a bug: it reaches the caller, who logs its traceback


class _Reporter:
    """Throttled LoadProgress(stage, bytes done, bytes total) to the caller's callback."""

    def __init__(self, callback: Callable[[LoadProgress], None] | None, stage: str) -> None:
        self.callback, self.stage = callback, stage
        self.total = 0
        self.last = 0.0
        self.lock = threading.Lock()

    def send(self, done: int, total: int, force: bool = False) -> None:
        if self.callback is None:
            return
        now = time.monotonic()
        with self.lock:
            if not force and now - self.last < PROGRESS_INTERVAL_S:
                return
            self.last = now
        self.callback(LoadProgress(stage=self.stage, done=done, total=total))


def _tqdm_class(report: _Reporter, cancel: threading.Event) -> type:
    """A tqdm class for snapshot_download that forwards byte counts and honours cancel.

    snapshot_download makes a files bar and byte bars (unit "B"); all per-file downloads
    update the byte bars, so the largest byte count is the bytes written so far.
    """
    from tqdm.auto import tqdm

    byte_bars = []

    class ProgressTqdm(tqdm):  # type: ignore[misc]  # tqdm ships no types
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True  # never draw to a terminal
            is_bytes = kwargs.get("unit") == "B"
            super().__init__(*args, **kwargs)
            self.n = kwargs.get("initial", 0) or 0
            self.total = kwargs.get("total")
            if is_bytes:
                byte_bars.append(self)

        def update(self, n: int = 1) -> None:
            self.n += n or 0
            if self in byte_bars:
                done = max(b.n for b in byte_bars)
                report.send(done, max(report.total, done))
            _check_cancel(cancel, report.stage.split(" ", 1)[-1])

    return ProgressTqdm
