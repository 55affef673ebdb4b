"""Every conversation's cache under one memory budget, least recently used evicted first.

Evicted caches are saved as safetensors in the data dir and restored when their
conversation returns, so a follow-up turn still prefills only its new tokens.
Runs on the engine thread only.
"""

import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

from engine.atomic import replacing
from engine.conversation import ConversationCache
from engine.errors import ChinwagError
from engine.kv_cache import ContiguousAttentionKVCache
from engine.paths import FILE_MODE, private_dir
from engine.types import MemoryReport

log = logging.getLogger(__name__)

DEFAULT_BUDGET_FRACTION = 0.25


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


class ConversationCaches:
    def __init__(self, budget_bytes: int, save_dir: Path):
        self.budget_bytes = budget_bytes
        self.save_dir = Path(save_dir)
        self.model_key = ""
        self._caches: "OrderedDict[str, ConversationCache]" = OrderedDict()
        self.stats = MemoryStats()

    def set_model(self, model_path: str) -> None:
        """A new model: in-memory caches belong to the old one and are dropped."""
        self._caches.clear()
        self.model_key = hashlib.sha1(str(model_path).encode()).hexdigest()[:16]

    @property
    def total_bytes(self) -> int:
        return sum(c.nbytes for c in self._caches.values())

    def report(self) -> MemoryReport:
        caches = list(self._caches.values())
        return MemoryReport(
            budget_bytes=self.budget_bytes, kv_bytes=self.total_bytes, conversations_in_memory=len(caches),
            tokens_held=sum(len(c.token_ids) for c in caches), positions_reserved=sum(c.capacity for c in caches),
            evictions=self.stats.evictions, restores=self.stats.restores,
            save_seconds=self.stats.save_seconds, restore_seconds=self.stats.restore_seconds,
        )

    def __len__(self):
        return len(self._caches)

    def __contains__(self, conv_id):
        return conv_id in self._caches

    def get(self, conv_id: str):
        """The conversation's cache, restored from disk if it was evicted; None if new."""
        cache = self._caches.get(conv_id)
        if cache is None:
            cache = self._restore(conv_id)
            if cache is None:
                return None
            self._caches[conv_id] = cache
        self._caches.move_to_end(conv_id)
        return cache

    def put(self, conv_id: str, cache: ConversationCache) -> None:
        self._caches[conv_id] = cache
        self._caches.move_to_end(conv_id)

    def enforce(self, keep: str = "") -> list:
        """Evict least recently used caches (never `keep`) until the budget holds."""
        evicted = []
        while self.total_bytes > self.budget_bytes:
            victim = next((cid for cid in self._caches if cid != keep), None)
            if victim is None:
                break
            self._save(victim, self._caches.pop(victim))
            evicted.append(victim)
        return evicted

    def forget(self, conv_id: str) -> None:
        """Drop a conversation's cache, and its saved file under every model (a deleted chat's
        text must not survive in a cache saved while another model was loaded)."""
        self._caches.pop(conv_id, None)
        for path in self.save_dir.glob(f"*/{self._file_name(conv_id)}"):
            path.unlink(missing_ok=True)

    # --- disk --------------------------------------------------------------

    @staticmethod
    def _file_name(conv_id: str) -> str:
        return hashlib.sha1(conv_id.encode()).hexdigest() + ".safetensors"

    def _path(self, conv_id: str) -> Path:
        return self.save_dir / self.model_key / self._file_name(conv_id)

    def _save(self, conv_id: str, cache: ConversationCache) -> None:
        self.stats.evictions += 1
        if not all(isinstance(c, ContiguousAttentionKVCache) for c in cache.layers) or not cache.token_ids:
            return  # other cache kinds are dropped and re-prefilled
        started = time.perf_counter()
        arrays = {"token_ids": mx.array(cache.token_ids, dtype=mx.int32)}
        for i, layer in enumerate(cache.layers):
            arrays[f"{i}.keys"], arrays[f"{i}.values"] = layer.state
        meta = {"conversation": conv_id, "replies": json.dumps([[t, list(ids)] for t, ids in cache.replies.items()]),
                "capacity": str(cache.capacity), "layers": str(len(cache.layers))}
        path = self._path(conv_id)
        try:
            private_dir(path.parent, "KV cache folder")
            with replacing(path, mode=FILE_MODE) as tmp:  # 0600: a cache decodes to the whole chat
                mx.save_safetensors(str(tmp), arrays, meta)
        except ChinwagError as e:  # a full disk costs a re-prefill later, never this turn
            log.warning("KV cache of %s not saved: %s", conv_id, e)
            return
        self.stats.save_seconds += time.perf_counter() - started

    def _restore(self, conv_id: str):
        path = self._path(conv_id)
        if not self.model_key or not path.exists():
            return None
        started = time.perf_counter()
        try:
            arrays, meta = mx.load(str(path), return_metadata=True)
            n_layers, capacity = int(meta["layers"]), int(meta["capacity"])
            layers = [
                ContiguousAttentionKVCache.from_state((arrays[f"{i}.keys"], arrays[f"{i}.values"]), capacity)
                for i in range(n_layers)
            ]
            cache = ConversationCache(layers=layers, token_ids=arrays["token_ids"].tolist())
            cache.eval()  # mx.load is lazy: read the file now, inside the timing
            cache.replies = {t: tuple(ids) for t, ids in json.loads(meta["replies"])}
        except (OSError, RuntimeError, ValueError, KeyError, TypeError) as e:
            # A damaged save (MLX's RuntimeError/ValueError, missing keys) costs a re-prefill,
            # never a failed turn; a bug elsewhere still propagates.
            log.warning("dropping unreadable KV cache %s: %s", path, e)
            path.unlink(missing_ok=True)
            return None
        path.unlink(missing_ok=True)
        self.stats.restores += 1
        self.stats.restore_seconds += time.perf_counter() - started
        return cache
