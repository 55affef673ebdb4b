"""Which saved cache holds the longest prefix of a prompt, without opening a single file.

Each saved cache's token ids are kept here as a chain of block hashes: the hash of block k covers
every id up to the end of that block, so one dict lookup per block of the prompt finds the caches
that hold the prompt that far. Held in memory, persisted next to the files (`prefixes.json` in
kv/<model key>/, 0600) so saved prefixes are found after a restart. It is only a hint: a file is
checked when read (engine/context/cache_file.py) and the exact common prefix taken from its ids,
so a stale or damaged index costs at most a wasted read. Engine thread only.
"""

import hashlib
import json
import logging
from array import array
from pathlib import Path

from engine.atomic import read_capped, write_atomic
from engine.errors import ChinwagError
from engine.paths import private_dir

log = logging.getLogger(__name__)

BLOCK = 32  # ids per hashed block: also the shortest prefix worth sharing
FILE_NAME = "prefixes.json"
_VERSION = 1
_CANDIDATES = 4  # files tried for one prompt, deepest match first
MAX_BYTES = 16 << 20  # an index past this is not read (4 GB of saved caches index in a few MB at most)


def block_hashes(ids: list[int]) -> list[str]:
    """The chained hash of each whole block of `ids`."""
    out, h = [], b""
    for i in range(0, len(ids) - len(ids) % BLOCK, BLOCK):
        h = hashlib.blake2b(h + array("q", ids[i : i + BLOCK]).tobytes(), digest_size=8).digest()
        out.append(h.hex())
    return out


class PrefixIndex:
    def __init__(self) -> None:
        self.chains: dict[str, list[str]] = {}  # conversation id -> its saved ids' block hashes
        self._owners: dict[str, set[str]] = {}  # block hash -> the conversations whose ids reach it

    def __len__(self) -> int:
        return len(self.chains)

    def __contains__(self, conv_id: str) -> bool:
        return conv_id in self.chains

    def add(self, conv_id: str, ids: list[int]) -> None:
        self._set(conv_id, block_hashes(ids))

    def _set(self, conv_id: str, chain: list[str]) -> None:
        self.remove(conv_id)
        self.chains[conv_id] = chain
        for h in chain:
            self._owners.setdefault(h, set()).add(conv_id)

    def remove(self, conv_id: str) -> None:
        for h in self.chains.pop(conv_id, ()):
            owners = self._owners.get(h)
            if owners is not None:
                owners.discard(conv_id)
                if not owners:
                    del self._owners[h]

    def clear(self) -> None:
        self.chains.clear()
        self._owners.clear()

    def candidates(self, ids: list[int], exclude: set[str] | frozenset[str] = frozenset()) -> list[tuple[int, str]]:
        """(ids shared at least, conversation) of the saved caches that hold a block or more of
        `ids`, deepest first, at most a few."""
        levels: list[tuple[int, set[str]]] = []
        for k, h in enumerate(block_hashes(ids)):
            owners = self._owners.get(h, set()) - exclude
            if not owners:
                break
            levels.append(((k + 1) * BLOCK, owners))
        out: list[tuple[int, str]] = []
        seen: set[str] = set()
        for depth, owners in reversed(levels):
            for conv_id in sorted(owners - seen):
                out.append((depth, conv_id))
                seen.add(conv_id)
            if len(out) >= _CANDIDATES:
                break
        return out[:_CANDIDATES]

    def load(self, path: Path) -> None:
        """Read a saved index; a damaged one is logged and ignored (its files are not shared)."""
        self.clear()
        try:
            data = json.loads(_read(path))
            if not isinstance(data, dict) or data.get("version") != _VERSION:
                raise ValueError("not a prefix index of this version")
            for conv_id, chain in data["chains"].items():
                if not (isinstance(chain, list) and all(isinstance(h, str) and len(h) == 16 for h in chain)):
                    raise ValueError(f"bad entry {conv_id!r:.40}")
                self._set(conv_id, chain)
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            log.warning("ignoring %s: %s", path, str(e)[:200])
            self.clear()

    def save(self, path: Path) -> None:
        write(path, dict(self.chains))


def _read(path: Path) -> str:
    """The index file's text: a regular file only (a symlink or a named pipe never redirects or
    blocks the read), of a size an index can have."""
    data = read_capped(path, MAX_BYTES, follow_links=False)
    if len(data) > MAX_BYTES:
        raise ValueError(f"over {MAX_BYTES:,} bytes")
    return data.decode("utf-8")


def drop(path: Path, conv_id: str) -> None:
    """Take a conversation out of the index saved at `path` (another model's: a deleted chat's ids
    leave no trace, not even hashed); a missing or damaged index is left as it is."""
    try:
        if json.dumps(conv_id) not in _read(path):  # most indexes never held it: not parsed
            return
    except (OSError, ValueError):  # none there, or one that load() would ignore anyway
        return
    index = PrefixIndex()
    index.load(path)
    if conv_id in index:
        index.remove(conv_id)
        index.save(path)


def write(path: Path, chains: dict[str, list[str]]) -> None:
    """Write an index's chains (a copy: any thread); a failure costs the sharing of saved prefixes
    after a restart, nothing else."""
    try:
        private_dir(path.parent, "KV cache folder")
        if path.is_symlink() or (path.exists() and not path.is_file()):
            path.unlink()  # as for a cache file: a link would have the index written wherever it points
        write_atomic(path, json.dumps({"version": _VERSION, "chains": chains}), mode=0o600)
    except (ChinwagError, OSError) as e:
        log.warning("prefix index not saved: %s", e)
