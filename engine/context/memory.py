"""Every conversation's cache under one memory budget, least recently used evicted first.

Evicted caches are saved as safetensors in the data dir and restored when their
conversation returns, so a follow-up turn still prefills only its new tokens. An eviction's
file is written on a thread of its own (engine/context/cache_writer.py): the engine thread
takes a snapshot and goes on, and a conversation that returns before its file is written gets
its cache back. On close
the most recently used caches are saved too, within a disk budget for `kv/` (least
recently used files deleted first), so they survive a restart. Files live under a key of
the model's weights (sizes, times and the first megabyte), so other weights never
restore them. A saved file is untrusted input: engine/context/cache_file.py checks it against
the loaded model before use, and one that fails is dropped (a re-prefill). A new conversation
starts with a copy of the longest prefix of its prompt that any cache holds, in memory or saved
(`shared`; saved ones are found through an index of block hashes, engine/context/prefixes.py).
Runs on the engine thread only.
"""

import hashlib
import logging
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from engine import log as chinwag_log
from engine.atomic import TEMP_SUFFIX, replacing
from engine.context import cache_file, prefixes
from engine.context.cache_file import CacheLayout, Snapshot, UnusableCache
from engine.context.cache_writer import CacheWriter, Job
from engine.context.conversation import ConversationCache, common_prefix
from engine.context.erase import erase_saved
from engine.context.prompt import History
from engine.errors import ChinwagError
from engine.paths import FILE_MODE, kv_file_name, private_dir
from engine.types import MemoryReport

log = logging.getLogger(__name__)

DEFAULT_BUDGET_FRACTION = 0.25
# Disk kept for saved caches (kv/), across every model.
DEFAULT_DISK_BUDGET_BYTES = 4 << 30
# Saving on close stops after this long (the most recently used are saved first): the window waits.
SAVE_ON_CLOSE_SECONDS = 5.0
_IDENTITY_BYTES = 1 << 20


def weights_identity(model_path: str | Path) -> str:
    """A key for a model folder's weights: each weight file's name, size and mtime, and its first MB.

    A model switch or an update of the folder (same path, new weights) gives a new key.
    """
    folder = Path(model_path)
    digest = hashlib.sha1()
    files = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.safetensors.index.json"))
    for f in files + [folder / "config.json"]:
        try:
            st = f.stat()
            with open(f, "rb") as fh:
                head = fh.read(_IDENTITY_BYTES)
        except OSError:
            continue
        digest.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}:".encode())
        digest.update(hashlib.sha1(head).digest())
    if not files:  # not a safetensors folder: fall back to the path
        digest.update(str(folder.resolve()).encode())
    return digest.hexdigest()[:16]


def default_budget_bytes() -> int:
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 8 << 30
    return int(ram * DEFAULT_BUDGET_FRACTION)


@dataclass
class MemoryStats:
    evictions: int = 0
    restores: int = 0
    save_seconds: float = 0.0
    restore_seconds: float = 0.0
    shared: int = 0  # new conversations started from another cache's prefix
    shared_tokens: int = 0


class ConversationCaches:
    def __init__(self, budget_bytes: int, save_dir: Path, disk_budget_bytes: int = DEFAULT_DISK_BUDGET_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self.disk_budget_bytes = disk_budget_bytes
        self.save_dir = Path(save_dir)
        self.model_key = ""
        self.layout: CacheLayout | None = None  # what a saved cache must hold for the loaded model
        self._caches: OrderedDict[str, ConversationCache] = OrderedDict()
        self.decoding: set[str] = set()  # conversations a batch decodes now (engine/local/batcher.py): never evicted
        # The draft model's cache of each conversation (speculative decoding): under the same
        # budget, evicted with its conversation, never saved (recomputed from the ids).
        self._drafts: dict[str, ConversationCache] = {}
        # Evicted caches whose files are being written: the snapshot, and the writer's job.
        self._writing: dict[str, tuple[Snapshot, Job]] = {}
        self.writer = CacheWriter()
        self.stats = MemoryStats()
        self.prefixes = prefixes.PrefixIndex()  # the saved caches' ids, by block hashes

    def set_model(self, model_path: str, layout: CacheLayout | None = None) -> None:
        """A new model: the old one's caches are saved for later and dropped from memory
        (dropped even if saving fails: the new weights never run on the old model's caches)."""
        try:
            self.save_all()
        finally:
            self._caches.clear()
            self._drafts.clear()
            self.prefixes.clear()
            self.model_key, self.layout = "", None  # nothing saved or restored if the key cannot be made
            self.model_key = weights_identity(model_path)
            self.layout = layout
            self._load_index()

    @property
    def total_bytes(self) -> int:
        return sum(c.nbytes for c in self._caches.values())

    @property
    def draft_bytes(self) -> int:
        return sum(c.nbytes for c in self._drafts.values())

    def draft(self, conv_id: str) -> ConversationCache | None:
        return self._drafts.get(conv_id)

    def put_draft(self, conv_id: str, cache: ConversationCache) -> None:
        self._drafts[conv_id] = cache

    def drop_drafts(self) -> None:
        """Another draft model: every draft cache goes."""
        self._drafts.clear()

    def report(self) -> MemoryReport:
        caches = list(self._caches.values())
        return MemoryReport(
            budget_bytes=self.budget_bytes,
            kv_bytes=self.total_bytes,
            conversations_in_memory=len(caches),
            tokens_held=sum(len(c.token_ids) for c in caches),
            positions_reserved=sum(c.capacity for c in caches),
            evictions=self.stats.evictions,
            restores=self.stats.restores,
            save_seconds=self.stats.save_seconds + self.writer.seconds,
            restore_seconds=self.stats.restore_seconds,
            draft_bytes=self.draft_bytes,
            draft_caches=len(self._drafts),
        )

    def __len__(self) -> int:
        return len(self._caches)

    def __contains__(self, conv_id: str) -> bool:
        return conv_id in self._caches

    def get(self, conv_id: str) -> ConversationCache | None:
        """The conversation's cache, restored if it was evicted (from its snapshot while its file is
        being written, else from the file); None if new."""
        self._settle()
        cache = self._caches.get(conv_id)
        if cache is None:
            cache = self._take_back(conv_id) if conv_id in self._writing else self._restore(conv_id)
            if cache is None:
                return None
            self._caches[conv_id] = cache
            self.prefixes.remove(conv_id)  # its file is gone: it is saved again from memory
        self._caches.move_to_end(conv_id)
        return cache

    def put(self, conv_id: str, cache: ConversationCache) -> None:
        if conv_id in self._writing:  # an older cache of it, being written: never restored now
            self._stop_writing(conv_id)
        self._caches[conv_id] = cache
        self._caches.move_to_end(conv_id)

    def enforce(self, keep: str = "") -> list[str]:
        """Evict least recently used caches (never `keep` or one decoding), each with its draft cache, until the budget
        holds. Their files are written on the writer's thread; this returns at once."""
        self._settle()
        evicted = []
        while self.total_bytes + self.draft_bytes > self.budget_bytes:
            victim = next((cid for cid in self._caches if cid != keep and cid not in self.decoding), None)
            if victim is None:
                break
            self._save_later(victim, self._caches.pop(victim))
            self._drafts.pop(victim, None)
            self.stats.evictions += 1
            evicted.append(victim)
        if evicted:
            self.writer.submit(self.prune_disk, "pruning the saved KV caches")  # after the writes
            self._save_index_later()
        self._hold_writing_to_budget()
        return evicted

    def _hold_writing_to_budget(self) -> None:
        """Wait for the oldest writes while the evicted caches not yet written hold more than the
        budget: a slow disk must not let them pile up in memory (they hold at most the budget again,
        or the one being written)."""
        while (
            len(self._writing) > 1 and sum(snap.cache.nbytes for snap, _ in self._writing.values()) > self.budget_bytes
        ):
            oldest = next(iter(self._writing))
            self._writing[oldest][1].done.wait()
            del self._writing[oldest]

    def save_all(self, seconds: float = SAVE_ON_CLOSE_SECONDS) -> int:
        """Save the caches in memory, most recently used first, within the disk budget and `seconds`
        (the most recent one whatever the time), once the evicted ones are written.

        Returns how many were saved. Least recently used files are deleted first to make room.
        """
        self.writer.flush()
        self._writing.clear()
        saved, used, began = 0, 0, time.perf_counter()
        for conv_id in reversed(list(self._caches)):
            cache = self._caches[conv_id]
            size = _file_bytes(cache)
            if used + size > self.disk_budget_bytes or (saved and time.perf_counter() - began > seconds):
                break
            try:
                if self._save(conv_id, cache):
                    saved, used = saved + 1, used + size
            except OSError:
                break  # a full disk costs a re-prefill later, never a failed close
        self.prune_disk()
        if self.model_key:
            self.prefixes.save(self._index_path())
        return saved

    def prune_disk(self) -> None:
        """Delete saved caches, least recently written first, until kv/ is within its budget.

        Never raises: a file deleted meanwhile is skipped, and anything but a regular file (a
        dangling symlink, a named pipe) is removed, as no save of ours made it."""
        files = []
        try:
            for f in self.save_dir.rglob("*.safetensors"):
                try:
                    st = f.lstat()
                    if stat.S_ISDIR(st.st_mode):
                        continue
                    if not stat.S_ISREG(st.st_mode) or f.name.endswith(f"{TEMP_SUFFIX}.safetensors"):
                        f.unlink()  # not ours, or left by a save that was cut off
                        continue
                except OSError:
                    continue
                files.append((st.st_mtime_ns, st.st_size, f))
        except OSError as e:
            log.warning("saved KV caches not pruned: %s", e)
            return
        used = 0
        for _, size, f in sorted(files, key=lambda t: t[0], reverse=True):
            used += size
            if used > self.disk_budget_bytes:
                _unlink(f)

    def forget(self, conv_id: str) -> None:
        """Drop a conversation's cache, and its saved file under every model (a deleted chat's
        text must not survive in a cache saved while another model was loaded)."""
        self._caches.pop(conv_id, None)
        self._drafts.pop(conv_id, None)
        if conv_id in self._writing:
            self._stop_writing(conv_id)  # before the files go: a write under way ends first
        erase_saved(conv_id, self.save_dir)  # and its entry in every model's saved index
        # Its ids' hashes go from this index too, written after any copy of it still queued.
        self.prefixes.remove(conv_id)
        self._save_index_later()

    # --- shared prefixes -----------------------------------------------------

    def shared(self, conv_id: str, ids: list[int], history: History, reserve: int = 0) -> ConversationCache | None:
        """A new cache for `conv_id` holding the longest prefix of `ids` that another cache holds
        (in memory, being written, or saved), copied with `history`; None when none holds a block
        of them, or the one that does cannot go back there (a checkpointed kind without a
        checkpoint before that point: the turn computes it all)."""
        self._settle()
        held = dict(self._held())
        held.pop(conv_id, None)
        n, source = max(((common_prefix(c.token_ids, ids), cid) for cid, c in held.items()), default=(0, ""))
        twin = held[source].fork(n, history, reserve) if n >= prefixes.BLOCK else None
        got = len(twin.token_ids) if twin is not None else 0
        for depth, cid in self.prefixes.candidates(ids, exclude=set(held) | {conv_id}):
            if depth <= got:
                break
            saved = self._read_saved(cid)
            if saved is None:
                continue
            copy = saved.fork(common_prefix(saved.token_ids, ids), history, reserve)
            if len(copy.token_ids) > got:
                twin, got = copy, len(copy.token_ids)
            break
        if twin is None or not got:
            return None
        self.stats.shared += 1
        self.stats.shared_tokens += got
        return twin

    def _held(self) -> Iterator[tuple[str, ConversationCache]]:
        """Every cache in memory: the conversations', and the evicted ones still being written."""
        yield from self._caches.items()
        for conv_id, (snap, _) in self._writing.items():
            yield conv_id, snap.cache

    def _read_saved(self, conv_id: str) -> ConversationCache | None:
        """Another conversation's saved cache, read to copy its prefix; its file stays (a bad one goes)."""
        path = self._path(conv_id)
        if not self.model_key or not os.path.lexists(path):
            self.prefixes.remove(conv_id)  # pruned meanwhile
            return None
        cache = self._read(path, conv_id)
        if cache is None:
            _unlink(path)
            self.prefixes.remove(conv_id)
        return cache

    def _index_path(self) -> Path:
        return self.save_dir / self.model_key / prefixes.FILE_NAME

    def _save_index_later(self) -> None:
        """Write the index on the writer's thread, after the files queued before it (a copy of it now)."""
        if self.model_key:
            chains = partial(prefixes.write, self._index_path(), dict(self.prefixes.chains))
            self.writer.submit(chains, "saving the prefix index")

    def _load_index(self) -> None:
        """The loaded model's prefix index, without the files gone since it was written."""
        self.prefixes.load(self._index_path())
        for conv_id in list(self.prefixes.chains):
            if not self._path(conv_id).is_file():
                self.prefixes.remove(conv_id)

    # --- disk --------------------------------------------------------------

    def _path(self, conv_id: str) -> Path:
        return self.save_dir / self.model_key / kv_file_name(conv_id)

    def _savable(self, cache: ConversationCache) -> bool:
        return bool(self.model_key and cache.token_ids)

    def _save(self, conv_id: str, cache: ConversationCache) -> bool:
        if not self._savable(cache):
            return False
        started = time.perf_counter()
        try:
            self._write(self._path(conv_id), cache_file.snapshot(conv_id, cache))
        except (ChinwagError, OSError, RuntimeError) as e:  # a full disk costs a re-prefill later, never this turn
            log.warning("KV cache of %s not saved: %s", conv_id, e)
            return False
        self.prefixes.add(conv_id, cache.token_ids)
        self.stats.save_seconds += time.perf_counter() - started
        return True

    def _save_later(self, conv_id: str, cache: ConversationCache) -> None:
        """Snapshot an evicted cache here and write its file on the writer's thread."""
        if not self._savable(cache):
            return
        started = time.perf_counter()
        snap = cache_file.snapshot(conv_id, cache)
        path = self._path(conv_id)
        self.stats.save_seconds += time.perf_counter() - started
        self._writing[conv_id] = (
            snap,
            self.writer.submit(lambda: self._write(path, snap), f"saving the KV cache of {conv_id}"),
        )
        self.prefixes.add(conv_id, cache.token_ids)

    def _settle(self) -> None:
        """Let go of the snapshots whose files are written: the files restore them now."""
        for conv_id in [c for c, (_, job) in self._writing.items() if job.done.is_set()]:
            del self._writing[conv_id]

    @staticmethod
    def _write(path: Path, snap: Snapshot) -> None:
        """Write a snapshot at `path`, whole or not at all; calls no MLX (any thread)."""
        private_dir(path.parent, "KV cache folder")
        if path.is_symlink() or (path.exists() and not path.is_file()):
            path.unlink()  # a link would have the save written wherever it points
        with replacing(path, mode=FILE_MODE) as tmp:  # 0600: a cache decodes to the whole chat
            snap.write(tmp)

    def _take_back(self, conv_id: str) -> ConversationCache:
        """An evicted cache that returns while its file is written: the very cache, from its snapshot."""
        started = time.perf_counter()
        cache = self._stop_writing(conv_id).cache
        self.stats.restores += 1
        self.stats.restore_seconds += time.perf_counter() - started
        return cache

    def _stop_writing(self, conv_id: str) -> Snapshot:
        """Cancel the write of an evicted cache, or wait for it and remove its file; its snapshot."""
        snap, job = self._writing.pop(conv_id)
        if not self.writer.cancel(job):
            _unlink(self._path(conv_id))  # as after a restore: it is saved again from memory
        return snap

    def _restore(self, conv_id: str) -> ConversationCache | None:
        """The saved cache, if there is one and every check passes (engine/context/cache_file.py).
        The file is removed either way: a restored cache is saved again from memory, a bad one never."""
        path = self._path(conv_id)
        if not self.model_key or not os.path.lexists(path):
            return None
        started = time.perf_counter()
        try:
            cache = self._read(path, conv_id)
        finally:
            _unlink(path)
            self.prefixes.remove(conv_id)
        if cache is None:
            return None
        self.stats.restores += 1
        self.stats.restore_seconds += time.perf_counter() - started
        return cache

    def _read(self, path: Path, conv_id: str) -> ConversationCache | None:
        """A saved cache that passes every check, else None (logged)."""
        try:
            if self.layout is None:
                raise UnusableCache("this model's caches are not saved")
            return cache_file.read(path, self.layout, conv_id)
        except UnusableCache as e:  # costs a re-prefill, never a failed turn
            log.warning("saved KV cache %s dropped, its chat is read again: %s", path.name, e)
        except Exception as e:  # noqa: BLE001 - a bug, logged with its traceback; the chat is still read again
            chinwag_log.report_bug(e, "restoring a saved KV cache")
        return None


def _unlink(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as e:  # a folder in its place: left for the user, never a failed turn
        log.warning("cannot remove %s: %s", path, e)


def _file_bytes(cache: ConversationCache) -> int:
    """About what a saved cache takes on disk: the valid prefix of every layer, and its ids."""
    n = len(cache.token_ids)
    held = sum(c.bytes_per_token * c.held if hasattr(c, "bytes_per_token") else c.nbytes for c in cache.leaves())
    return int(held) + cache.checkpoints.nbytes + 8 * n
