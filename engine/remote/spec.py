"""Specs that name a server's model: URL, URL#MODEL, NAME/MODEL (a saved server's name)."""

from dataclasses import dataclass

from engine.errors import ChinwagError
from engine.remote import servers
from engine.remote.errors import CONNECT_TIMEOUT_S
from engine.remote.urls import host_label, normalize_url
from engine.types import ModelInfo


@dataclass(frozen=True)
class RemoteTarget:
    """One model on one server."""

    server: servers.Server
    model: str
    spec: str = ""  # what the user asked for; the ModelInfo id

    def info(self) -> ModelInfo:
        return servers.model_info(self.server, self.model, self.spec)


def is_remote_spec(spec: str) -> bool:
    spec = str(spec).strip()
    if spec.startswith(("http://", "https://")):
        return True
    name = spec.split("/", 1)[0]
    return "/" in spec and bool(name) and servers.get_server(name) is not None


def resolve(spec: str) -> RemoteTarget | None:
    """The server model a spec names, or None for a local spec. Asks the server for its models."""
    spec = str(spec).strip()
    if spec.startswith(("http://", "https://")):
        url, _, model = spec.partition("#")
        base = normalize_url(url)
        # A saved server's URL gets its name and API key.
        server = next((s for s in servers.list_servers() if s.url == base), None) or servers.Server(
            host_label(base), base
        )
    elif is_remote_spec(spec):
        name, model = spec.split("/", 1)
        saved = servers.get_server(name)
        assert saved is not None  # is_remote_spec just found it
        server = saved
    else:
        return None
    try:
        available = servers.fetch_model_ids(server, timeout=CONNECT_TIMEOUT_S)
    except servers.NoModelList:
        if not model:
            raise
        available = [model]
    if not model:
        model = available[0]
    elif model not in available and model != servers.DEFAULT_MODEL and available != [servers.DEFAULT_MODEL]:
        raise ChinwagError(f"server {server.name} has no model '{model}'; it serves: {', '.join(available[:8])}")
    canonical = f"{url.strip()}#{model}" if spec.startswith(("http://", "https://")) else f"{server.name}/{model}"
    return RemoteTarget(server, model, canonical)
