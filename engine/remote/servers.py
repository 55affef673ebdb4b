"""Saved model servers (OpenAI-compatible, e.g. mlx_lm.server, exo, vLLM, SGLang, llama.cpp, Ollama)
and their API keys, and the models they serve.

Sync functions with no MLX: listing runs off the engine thread. Servers live in
<data>/servers.json (name and URL only). An API key goes to the system keychain through
`keyring` when a real backend is available, otherwise to <data>/server-keys.json (mode
0600); never to the database, exports, logs or error messages.
"""

import concurrent.futures
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import paths
from engine.atomic import read_capped, write_atomic
from engine.errors import ChinwagError
from engine.remote.errors import check_key, describe_http_error, headers_for, is_http_error, response_error
from engine.remote.urls import display_url, normalize_url
from engine.types import UNREACHABLE, UNUSABLE, ModelInfo, ModelStatus, ServerInfo

SERVERS_FILE = "servers.json"
KEYS_FILE = "server-keys.json"
KEYRING_SERVICE = "Chinwag model servers"
KEYCHAIN = "the system keychain"
# mlx_lm.server serves its --model under this name, and answers GET /v1/models with an
# empty body when it has no Hugging Face cache folder.
DEFAULT_MODEL = "default_model"
LIST_TIMEOUT_S = 3.0  # the whole GET /models: listing servers must not hold the Model menu for long
# A model list past these is a hostile one: its first MAX_MODELS ids are kept (the Model menu and
# `chinwag models` list each), longer ids dropped. Real servers list a few hundred at most.
MAX_MODELS = 1000
MAX_ID_CHARS = 1000
MAX_FILE_BYTES = 1 << 20  # servers.json or the key file: a few hundred bytes each
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}$")


class ServerAnswered(ChinwagError):
    """The server was reached and answered, but not with a model list (it refused the key, an
    error status, not JSON): "unusable", not "unreachable"."""


class NoModelList(ServerAnswered):
    """A server without GET /models: its models can still be named."""


@dataclass(frozen=True)
class Server:
    name: str
    url: str  # the API base, e.g. http://127.0.0.1:8080/v1
    api_key: str = field(default="", repr=False)
    key_storage: str = ""  # where the key is kept (KEYCHAIN or the file's description); "" without a key


# --- the saved list -----------------------------------------------------------------------


def _servers_path() -> Path:
    return paths.data_dir() / SERVERS_FILE


def _write_private(path: Path, data: object) -> None:
    """Only you can read it (0600): one holds API keys, the other says where your servers are."""
    write_atomic(path, json.dumps(data, indent=2), mode=0o600)


def _read_json(path: Path, default: Any) -> Any:
    """The JSON in `path`, `default` if there is none; a regular file only, opened without blocking
    (a named pipe there would hold every listing) and bounded (a link to /dev/zero never ends)."""
    try:
        data = read_capped(path, MAX_FILE_BYTES)
    except FileNotFoundError:
        return default
    except OSError as e:  # NotAFile says what is there
        raise ChinwagError(f"cannot read {path}: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ChinwagError(f"cannot read {path}: it is over {MAX_FILE_BYTES:,} bytes, not a list Chinwag wrote")
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise ChinwagError(f"cannot read {path}: it is not JSON") from None


def _load() -> list[dict[str, Any]]:
    data = _read_json(_servers_path(), {"servers": []})
    rows = data.get("servers", []) if isinstance(data, dict) else []
    return [r for r in rows if isinstance(r, dict) and isinstance(r.get("name"), str) and isinstance(r.get("url"), str)]


def list_servers() -> list[Server]:
    """The saved servers, keys included (callers never print them)."""
    return [Server(r["name"], r["url"], *find_api_key(r["name"])) for r in _load()]


def server_info(server: Server) -> ServerInfo:
    return ServerInfo(server.name, display_url(server.url), bool(server.api_key), server.key_storage)


def server_infos() -> list[ServerInfo]:
    return [server_info(s) for s in list_servers()]


def get_server(name: str) -> Server | None:
    for r in _load():
        if r["name"] == name:
            return Server(r["name"], r["url"], *find_api_key(r["name"]))
    return None


def check_name(name: str) -> str:
    name = str(name).strip()
    if not _NAME.match(name):
        raise ChinwagError(f"bad server name '{name[:40]}': use 1-40 letters, digits, spaces, '.', '_' or '-' (no '/')")
    return name


def add_server(name: str, url: str, key: str | None = None, replace: str = "") -> Server:
    """Save a server (or update the one named `replace`); key None keeps the stored key, "" removes it."""
    name, url = check_name(name), normalize_url(url)
    key = None if key is None else check_key(key)
    rows = _load()
    others = [r for r in rows if r["name"] not in (name, replace)]
    if replace != name and any(r["name"] == name for r in rows):
        raise ChinwagError(f"a server named '{name}' already exists: remove it or pick another name")
    old_key = api_key(replace or name)
    position = next((i for i, r in enumerate(rows) if r["name"] in (name, replace)), len(others))
    others.insert(min(position, len(others)), {"name": name, "url": url})
    _write_private(_servers_path(), {"servers": others})
    if replace and replace != name:
        set_api_key(replace, "")
    set_api_key(name, old_key if key is None else key)
    return Server(name, url, *find_api_key(name))  # where the key really is, not where it was meant to go


def remove_server(name: str) -> None:
    rows = _load()
    if not any(r["name"] == name for r in rows):
        raise ChinwagError(f"no saved server named '{name}' (see `chinwag servers list`)")
    api_key(name)  # a key file that cannot be read says so before the list changes
    _write_private(_servers_path(), {"servers": [r for r in rows if r["name"] != name]})
    set_api_key(name, "")


# --- API keys: the keychain when there is one, else a 0600 file -----------------------------


def _keyring() -> Any:  # the keyring module, or None
    """The keyring module when a real backend is available (CHINWAG_KEYRING=0 turns it off)."""
    if os.environ.get("CHINWAG_KEYRING", "1") == "0":
        return None
    try:
        import keyring
        from keyring.backends import fail

        backend = keyring.get_keyring()
    except Exception:  # noqa: BLE001 - no keyring, or a backend that breaks on start-up
        return None
    if isinstance(backend, fail.Keyring) or getattr(backend, "priority", 1) <= 0:
        return None
    return keyring


def keys_file() -> Path:
    return paths.data_dir() / KEYS_FILE


def key_file_storage() -> str:
    return f"{keys_file()} (readable only by you)"


def api_key(name: str) -> str:
    return find_api_key(name)[0]


def find_api_key(name: str) -> tuple[str, str]:
    """(key, where it is kept): the keychain's, else the file's (a keychain that refused a write); ("", "")."""
    ring = _keyring()
    if ring is not None:
        try:
            key = ring.get_password(KEYRING_SERVICE, name) or ""
        except Exception:  # noqa: BLE001 - a locked or broken keychain: fall back to the file
            key = ""
        if key:
            return key, KEYCHAIN
    keys = _read_json(keys_file(), {})
    value = keys.get(name, "") if isinstance(keys, dict) else ""
    return (value, key_file_storage()) if isinstance(value, str) and value else ("", "")


def set_api_key(name: str, key: str) -> None:
    ring = _keyring()
    if ring is not None:
        try:
            if key:
                ring.set_password(KEYRING_SERVICE, name, key)
            else:
                try:
                    ring.delete_password(KEYRING_SERVICE, name)
                except Exception:  # noqa: BLE001 - nothing stored
                    pass
            _set_file_key(name, "")
            return
        except Exception:  # noqa: BLE001 - a keychain that refuses the write: the key goes to the 0600 file
            pass
    _set_file_key(name, key)


def _set_file_key(name: str, key: str) -> None:
    path = keys_file()
    keys = _read_json(path, {})
    keys = keys if isinstance(keys, dict) else {}
    if key:
        keys[name] = key
    elif name in keys:
        del keys[name]
    else:
        return
    _write_private(path, keys)


# --- the models a server serves ------------------------------------------------------------


def fetch_model_ids(server: Server, timeout: float | None = None) -> list[str]:
    """GET {url}/models, all of it within `timeout` and bounded in size (engine/remote/network.py);
    an empty 200 body (mlx_lm.server without a HF cache) means DEFAULT_MODEL."""
    status, content = _get_models(server, timeout)
    if status == 404:
        raise NoModelList(
            f"server {server.name}: GET {display_url(server.url)}/models is not there (HTTP 404); "
            f"name the model: {server.name}/MODEL or URL#MODEL"
        )
    if status != 200:
        raise ServerAnswered(f"server {server.name}: {response_error(status, content, server.api_key)}")
    if not content.strip():
        return [DEFAULT_MODEL]
    return _model_ids(server, content)


def _get_models(server: Server, timeout: float | None) -> tuple[int, bytes]:
    """(status, body) of GET {url}/models; the network's errors as one line naming the server."""
    from engine.remote import network

    try:
        normalize_url(server.url)  # a hand-edited servers.json: one line, not a bug in httpx
    except ChinwagError as e:
        raise ChinwagError(f"server {server.name}: {e}") from None
    headers = headers_for(server.api_key, server.name)
    try:
        return network.get(f"{server.url}/models", headers, timeout or LIST_TIMEOUT_S)
    except ChinwagError as e:  # a deadline or a bound passed
        raise ChinwagError(f"server {server.name}: {e}") from None
    except Exception as e:
        if not is_http_error(e):
            raise  # a bug, not the network
        raise ChinwagError(f"server {server.name}: {describe_http_error(e, server)}") from None


def _model_ids(server: Server, content: bytes) -> list[str]:
    """The model ids of an OpenAI model list (at most MAX_MODELS, each of at most MAX_ID_CHARS)."""
    try:
        data = json.loads(content).get("data")
        ids = [m["id"] for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        ids = [i for i in ids if 0 < len(i) <= MAX_ID_CHARS][:MAX_MODELS]
    except (ValueError, AttributeError, TypeError, RecursionError):
        raise ServerAnswered(
            f"server {server.name}: GET {display_url(server.url)}/models did not answer an OpenAI model list"
        ) from None
    return ids or [DEFAULT_MODEL]


def model_info(server: Server, model: str, spec: str = "") -> ModelInfo:
    return ModelInfo(
        id=spec or f"{server.name}/{model}",
        name=f"{model} on {server.name}",
        path=display_url(server.url),
        architecture="remote",
        status=ModelStatus.READY,
        source="server",
        server=server.name,
    )


def models_of(server: Server) -> list[ModelInfo]:
    """The server's models, or one unusable entry with the reason it cannot be used: unreachable
    (no answer, a bad URL), or unusable (it answered, but refused the key or sent no model list)."""
    try:
        return [model_info(server, m) for m in fetch_model_ids(server)]
    except ChinwagError as e:
        state = UNUSABLE if isinstance(e, ServerAnswered) else UNREACHABLE
        reason = str(e).removeprefix(f"server {server.name}: ")
        return [
            ModelInfo(
                id=f"{server.name}/",
                name=server.name,
                path=display_url(server.url),
                architecture="remote",
                status=ModelStatus.UNUSABLE,
                reason=f"{state}: {reason}",
                source="server",
                server=server.name,
            )
        ]


def server_models() -> list[ModelInfo]:
    """Every saved server's models, the servers asked in parallel. A saved list that cannot be
    read is one unusable entry saying why, so the local models are still listed beside it."""
    try:
        saved = list_servers()
    except ChinwagError as e:
        return [
            ModelInfo(
                id=f"{SERVERS_FILE}/",
                name=SERVERS_FILE,
                path=str(_servers_path()),
                architecture="remote",
                status=ModelStatus.UNUSABLE,
                reason=str(e),
                source="server",
                server=SERVERS_FILE,
            )
        ]
    if not saved:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, len(saved))) as pool:
        return [info for infos in pool.map(models_of, saved) for info in infos]
