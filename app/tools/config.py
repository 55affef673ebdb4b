"""MCP servers: `mcp.json` in the data folder, in the format Claude Desktop, Cursor and LM Studio use,
and Chinwag's own settings for them (enabled, allow/ask/deny) in a sibling file those apps never read.

mcp.json: {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}} (stdio) or
{"NAME": {"url": "...", "headers": {...}}} (streamable HTTP). Keys Chinwag does not know are kept as
they are when it writes the file. No Qt, no MLX.
"""

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

from engine import paths
from engine.atomic import write_atomic
from engine.errors import ChinwagError

MCP_FILE = "mcp.json"
SETTINGS_FILE = "mcp-chinwag.json"
DEFAULT_MAX_ROUNDS = 8  # tool rounds in one reply before Chinwag stops the loop
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Policy(StrEnum):
    """What happens when the model calls a tool (the values are written to the settings file)."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


@dataclass(frozen=True)
class ServerConfig:
    name: str
    command: str = ""  # stdio
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""  # streamable HTTP
    headers: dict[str, str] = field(default_factory=dict)
    enabled: bool = True
    policy: Policy = Policy.ASK  # for its tools that have no policy of their own
    tool_policies: dict[str, Policy] = field(default_factory=dict)

    @property
    def transport(self) -> str:
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        """The command line or URL, for lists (never the env or the headers: they may hold keys)."""
        return self.url or " ".join([self.command, *self.args])

    def policy_for(self, tool: str) -> Policy:
        return self.tool_policies.get(tool, self.policy)


@dataclass(frozen=True)
class ToolsConfig:
    servers: tuple[ServerConfig, ...]  # in the file's order
    max_rounds: int = DEFAULT_MAX_ROUNDS

    def server(self, name: str) -> ServerConfig:
        for s in self.servers:
            if s.name == name:
                return s
        raise ChinwagError(f"no MCP server named {name!r} in {mcp_path()}")

    @property
    def enabled(self) -> tuple[ServerConfig, ...]:
        return tuple(s for s in self.servers if s.enabled)


def mcp_path() -> Path:
    return paths.data_dir() / MCP_FILE


def settings_path() -> Path:
    return paths.data_dir() / SETTINGS_FILE


# --- reading ------------------------------------------------------------------------------


def _read(path: Path, default: object) -> object:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return default
    except OSError as e:
        raise ChinwagError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_json(raw, path)


def parse_json(raw: bytes, path: Path | str) -> object:
    """JSON text, or one line naming the file and the place where it is not JSON."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ChinwagError(f"{path} is not UTF-8 (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ChinwagError(f"{path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ChinwagError(f"{path} is nested too deeply") from None


def _strings(value: object, where: str, path: Path | str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ChinwagError(f"{path}: {where} must be an object of strings")
    return dict(value)


def parse_servers(data: object, path: Path | str) -> list[ServerConfig]:
    """The servers of an mcp.json document (without Chinwag's settings); ChinwagError naming the place."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers", {}), dict):
        raise ChinwagError(f'{path}: expected {{"mcpServers": {{"NAME": {{...}}}}}} at the top')
    servers = []
    for name, entry in data.get("mcpServers", {}).items():
        where = f"mcpServers.{name}"
        if not _NAME.match(name):
            raise ChinwagError(f"{path}: {where}: a server name is letters, digits, '.', '_' or '-' (64 at most)")
        if not isinstance(entry, dict):
            raise ChinwagError(f"{path}: {where} must be an object")
        command, url = entry.get("command"), entry.get("url")
        if url is not None:
            if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
                raise ChinwagError(f"{path}: {where}.url must be an http:// or https:// URL")
            servers.append(
                ServerConfig(name, url=url, headers=_strings(entry.get("headers"), f"{where}.headers", path))
            )
            continue
        if not isinstance(command, str) or not command.strip():
            raise ChinwagError(f'{path}: {where} needs "command" (a stdio server) or "url" (an HTTP server)')
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ChinwagError(f"{path}: {where}.args must be a list of strings")
        env = _strings(entry.get("env"), f"{where}.env", path)
        servers.append(ServerConfig(name, command=command, args=tuple(args), env=env))
    return servers


def _policy(value: Any, where: str, path: Path | str) -> Policy:  # value: a JSON value
    try:
        return Policy(value)
    except ValueError:
        raise ChinwagError(f"{path}: {where} must be allow, ask or deny, got {value!r:.40}") from None


def load() -> ToolsConfig:
    """mcp.json with Chinwag's settings applied; a server the settings do not mention is enabled, ask."""
    path, spath = mcp_path(), settings_path()
    servers = parse_servers(_read(path, {"mcpServers": {}}), path)
    settings = _read(spath, {})
    if not isinstance(settings, dict) or not isinstance(settings.get("servers", {}), dict):
        raise ChinwagError(f'{spath}: expected {{"servers": {{...}}, "max_tool_rounds": N}}')
    rounds = settings.get("max_tool_rounds", DEFAULT_MAX_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 100:
        raise ChinwagError(f"{spath}: max_tool_rounds must be an integer from 1 to 100")
    out = []
    for s in servers:
        own = settings.get("servers", {}).get(s.name, {})
        if not isinstance(own, dict):
            raise ChinwagError(f"{spath}: servers.{s.name} must be an object")
        tools = own.get("tools", {})
        if not isinstance(tools, dict):
            raise ChinwagError(f"{spath}: servers.{s.name}.tools must be an object")
        out.append(
            replace(
                s,
                enabled=bool(own.get("enabled", True)),
                policy=_policy(own.get("policy", "ask"), f"servers.{s.name}.policy", spath),
                tool_policies={t: _policy(p, f"servers.{s.name}.tools.{t}", spath) for t, p in tools.items()},
            )
        )
    return ToolsConfig(tuple(out), rounds)


# --- writing ------------------------------------------------------------------------------


def _write(path: Path, data: object) -> None:
    # 0600: env and headers may hold API keys.
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n", mode=0o600)


def add_server(
    name: str,
    command: str = "",
    args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    url: str = "",
    headers: dict[str, str] | None = None,
) -> ServerConfig:
    """Add (or replace) a server in mcp.json, keeping every other key of the file."""
    path = mcp_path()
    data = _read(path, {"mcpServers": {}})
    parse_servers(data, path)  # a broken file is reported, never overwritten
    assert isinstance(data, dict)
    entry: dict[str, Any] = {"url": url} if url else {"command": command, "args": list(args)}
    if url and headers:
        entry["headers"] = dict(headers)
    if not url and env:
        entry["env"] = dict(env)
    probe = parse_servers({"mcpServers": {name: entry}}, f"the server {name!r}")[0]
    data.setdefault("mcpServers", {})[name] = entry
    _write(path, data)
    return probe


def remove_server(name: str) -> None:
    path = mcp_path()
    data = _read(path, {"mcpServers": {}})
    parse_servers(data, path)
    assert isinstance(data, dict)
    if name not in data.get("mcpServers", {}):
        raise ChinwagError(f"no MCP server named {name!r} in {path}")
    del data["mcpServers"][name]
    _write(path, data)
    settings = _read(settings_path(), {})
    if isinstance(settings, dict) and name in settings.get("servers", {}):
        del settings["servers"][name]
        _write(settings_path(), settings)


def _update_settings(name: str, change: Callable[[dict[str, Any]], None]) -> None:
    load().server(name)  # it exists, and both files are readable
    settings = _read(settings_path(), {})
    assert isinstance(settings, dict)
    change(settings.setdefault("servers", {}).setdefault(name, {}))
    _write(settings_path(), settings)


def set_enabled(name: str, enabled: bool) -> None:
    _update_settings(name, lambda own: own.__setitem__("enabled", bool(enabled)))


def set_policy(name: str, policy: Policy, tool: str | None = None) -> None:
    """The server's default for its tools, or (with `tool`) one tool's own policy."""
    policy = Policy(policy)
    if tool is None:
        _update_settings(name, lambda own: own.__setitem__("policy", policy.value))
    else:
        _update_settings(name, lambda own: own.setdefault("tools", {}).__setitem__(tool, policy.value))


def set_max_rounds(rounds: int) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 100:
        raise ChinwagError(f"max tool rounds must be an integer from 1 to 100, got {rounds!r}")
    load()
    settings = _read(settings_path(), {})
    assert isinstance(settings, dict)
    settings["max_tool_rounds"] = rounds
    _write(settings_path(), settings)


def import_file(source: str | Path) -> list[str]:
    """Add every server of another app's mcp.json (Claude Desktop, Cursor, LM Studio); their names."""
    source = Path(source)
    servers = parse_servers(_read(source, None) if source.exists() else _missing(source), source)
    for s in servers:
        add_server(s.name, s.command, s.args, s.env, s.url, s.headers)
    return [s.name for s in servers]


def _missing(source: Path) -> NoReturn:
    raise ChinwagError(f"cannot read {source}: no such file")
