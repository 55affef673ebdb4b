"""Every kind of layer cache mlx-lm models make, in one place: what Chinwag keeps for each.

- plain attention (`KVCache`): our growing contiguous cache, shaped by its first write, which
  also fits latent attention (MLA: deepseek_v3, glm4_moe_lite write a `kv_lora_rank` latent and a
  rope key); trims to any position.
- sliding-window attention (`RotatingKVCache`, keep=0): `WindowedKVCache`, bounded, trims within
  its reserve; checkpoints hold its window for deeper edits.
- recurrent state (`ArraysCache`: Mamba/Mamba2 SSM state, gated delta nets, short convolutions):
  kept as mlx-lm makes it; it cannot trim, so checkpoints hold copies of it.
- composites (`CacheList`): their parts, each of the kinds above.
Any other kind is refused when the model loads (`UnsupportedCache`), never met mid-turn.
"""

from collections.abc import Iterator
from copy import deepcopy
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, CacheList, KVCache, RotatingKVCache

from engine.context.checkpoints import Checkpoint
from engine.context.kv_cache import ContiguousAttentionKVCache
from engine.context.quantized_cache import QuantizedContiguousKVCache
from engine.context.window_cache import WindowedKVCache
from engine.errors import ChinwagError, ModelError
from engine.types import KVQuantization

# Families whose KVCache holds a latent (kv_lora_rank) and a rope key read by their own attention.
LATENT_FAMILIES = frozenset({"deepseek_v2", "deepseek_v3", "deepseek_v32", "glm4_moe_lite", "minicpm3", "kimi_k2"})


class UnsupportedCache(ModelError):
    """A model whose cache kind Chinwag does not keep; the message names the family and the kind."""


def family_of(model: Any) -> str:
    args = getattr(model, "args", None) or getattr(model, "config", None)
    return str(getattr(args, "model_type", None) or type(model).__module__.rsplit(".", 1)[-1])


def make_layers(model: Any, capacity: int, quant: KVQuantization | None = None) -> list[Any]:
    """The model's per-layer caches as Chinwag keeps them (see the module's docstring); with
    `quant`, plain attention layers are stored quantized (latent ones never)."""
    from mlx_lm.models.cache import make_prompt_cache

    family = family_of(model)
    quant = None if family in LATENT_FAMILIES else quant
    return [_convert(c, capacity, family, quant) for c in make_prompt_cache(model)]


def _convert(cache: Any, capacity: int, family: str, quant: KVQuantization | None) -> Any:
    kind = type(cache)
    if kind is KVCache and quant is not None:
        return QuantizedContiguousKVCache(quant.bits, quant.group_size, capacity)
    if kind is KVCache:
        return ContiguousAttentionKVCache(max_seq_len=capacity)
    if kind is RotatingKVCache and cache.keep == 0:
        return WindowedKVCache(cache.max_size)
    if isinstance(cache, ArraysCache):
        return cache
    if kind is CacheList:
        return CacheList(*(_convert(c, capacity, family, quant) for c in cache.caches))
    detail = f" keeping {cache.keep} tokens" if kind is RotatingKVCache else ""
    raise UnsupportedCache(
        f"{family} models are not supported yet: their {kind.__name__}{detail} cache is not one Chinwag keeps"
    )


def check_model(model: Any, quant: KVQuantization | None = None) -> None:
    """Refuse a model whose caches Chinwag cannot keep, before any turn (UnsupportedCache); with
    `quant`, also one whose attention cannot read a quantized cache (a one-token graph, not computed)."""
    layers = make_layers(model, 1, quant)
    if quant is None or not any(isinstance(c, QuantizedContiguousKVCache) for c in leaves(layers)):
        return
    try:
        model(mx.array([[0]], dtype=mx.int32), cache=layers)
    except ChinwagError:
        raise
    except (ValueError, TypeError) as e:  # mlx-lm's quantized attention: no sinks, shapes
        raise UnsupportedCache(
            f"{family_of(model)} models cannot use a quantized KV cache ({quant.label}): {e}"
        ) from None


def leaves(layers: list[Any]) -> Iterator[Any]:
    """Every cache below `layers`, composites opened."""
    for c in layers:
        if isinstance(c, CacheList):
            yield from leaves(list(c.caches))
        else:
            yield c


def trims_exactly(leaf: Any) -> bool:
    """Attention caches trim any few tokens back (a window within its reserve); recurrent state cannot."""
    return isinstance(leaf, (ContiguousAttentionKVCache, QuantizedContiguousKVCache))


def held_back(leaf: Any) -> bool:
    """Whether going back needs a checkpoint of this leaf (beyond what it trims itself)."""
    return isinstance(leaf, (ArraysCache, WindowedKVCache))


def can_trim_to(leaf: Any, position: int, length: int) -> bool:
    """Whether `leaf`, holding `length` tokens, can be brought back to `position` by trimming."""
    if isinstance(leaf, ArraysCache):
        return position == length
    return bool(leaf.can_trim_to(position))


def trim_to(leaf: Any, position: int) -> None:
    if not isinstance(leaf, ArraysCache):
        leaf.trim(leaf.offset - position)


def save(leaf: Any) -> Any:
    """A copy of what `leaf` needs to resume from here (the caller's position): state or window."""
    if isinstance(leaf, WindowedKVCache):
        return leaf.window_state()
    # New handles: a model's in-place write to the live state cannot reach the copy.
    return [None if a is None else mx.array(a) for a in leaf.cache]


def restore(leaf: Any, state: Any) -> None:
    if isinstance(leaf, WindowedKVCache):
        leaf.restore_window(state)
    else:
        leaf.cache = [None if a is None else mx.array(a) for a in state]
        leaf.left_padding = leaf.lengths = None


def checkpoint(position: int, states: tuple[Any, ...]) -> Checkpoint:
    """A checkpoint of `states` (each leaf's save()), evaluated, with the bytes it holds."""
    arrays = [a for state in states for a in state_arrays(state)]
    mx.eval(arrays)
    return Checkpoint(position, states, sum(a.nbytes for a in arrays))


def state_arrays(state: Any) -> list[Any]:
    if isinstance(state, tuple):  # a window: keys, values, offset
        return [a for a in state[:2] if a.ndim == 4]
    return [a for a in state if a is not None]


def reset(leaf: Any) -> None:
    if isinstance(leaf, ArraysCache):
        leaf.cache = [None] * len(leaf.cache)
        leaf.left_padding = leaf.lengths = None
    elif isinstance(leaf, WindowedKVCache):
        leaf.trim(leaf.held)
        leaf.start = leaf.offset = 0
    else:
        leaf.trim(leaf.offset)


def arrays(leaf: Any) -> list[Any]:
    """The arrays a leaf holds now (to evaluate them)."""
    if isinstance(leaf, ArraysCache):
        return [a for a in leaf.cache if a is not None]
    if isinstance(leaf, QuantizedContiguousKVCache):
        return [*leaf.keys, *leaf.values] if leaf.shaped else []
    return [leaf.keys, leaf.values]


def copy(leaf: Any, upto: int | None = None, reserve: int = 0) -> Any:
    """An independent copy of `leaf` and everything it holds (a fork's). With `upto`, a growing
    attention cache copies only its first `upto` positions, in a buffer of at least `reserve`
    (a shared prefix: no copy of what is trimmed at once); other kinds are copied whole."""
    if isinstance(leaf, CacheList):
        return CacheList(*(copy(c, upto, reserve) for c in leaf.caches))
    if isinstance(leaf, ArraysCache):
        twin = ArraysCache(len(leaf.cache))
        twin.cache = [None if a is None else mx.array(a) for a in leaf.cache]
        return twin
    if upto is None or not leaf.shaped or not 0 < upto <= leaf.offset:
        return deepcopy(leaf)  # the attention caches copy what they hold
    if type(leaf) is ContiguousAttentionKVCache:
        keys, values = leaf.get_kv()
        return ContiguousAttentionKVCache.from_state((keys[..., :upto, :], values[..., :upto, :]), reserve)
    if isinstance(leaf, QuantizedContiguousKVCache):
        keys, values = leaf.get_kv()
        cut = [tuple(a[..., :upto, :] for a in part) for part in (keys, values)]
        return QuantizedContiguousKVCache.from_parts(cut[0], cut[1], leaf.bits, leaf.group_size, reserve)
    return deepcopy(leaf)  # a window: bounded, copied whole and trimmed by the caller
