"""Wired memory on Metal (engine/local/wired.py): raised to the plan's weights and caches while a
model is loaded, within the device's maximum, put back at quit. This machine has no Metal, so MLX's
functions are patched (mocks with spec=) and the calls are checked."""

from unittest import mock

import mlx.core as mx
import pytest

from engine.local.wired import WiredLimit
from engine.models import fit

GB = 10**9
MAX_WORKING_SET = 6 * GB
BEFORE = 123  # the wired limit before Chinwag changed it


@pytest.fixture
def metal(monkeypatch):
    """MLX as on a Mac with Metal: its wired-limit calls recorded."""
    calls = mock.Mock()
    calls.set_wired_limit = mock.Mock(spec=mx.set_wired_limit, return_value=BEFORE)
    calls.synchronize = mock.Mock(spec=mx.synchronize)
    monkeypatch.setattr(mx.metal, "is_available", mock.Mock(spec=mx.metal.is_available, return_value=True))
    monkeypatch.setattr(
        mx,
        "device_info",
        mock.Mock(spec=mx.device_info, return_value={"max_recommended_working_set_size": MAX_WORKING_SET}),
    )
    monkeypatch.setattr(mx, "set_wired_limit", calls.set_wired_limit)
    monkeypatch.setattr(mx, "synchronize", calls.synchronize)
    return calls


def test_raises_the_limit_to_what_is_wanted(metal):
    wired = WiredLimit()
    assert wired.raise_to(2 * GB) == 2 * GB
    metal.set_wired_limit.assert_called_once_with(2 * GB)


def test_never_above_the_devices_recommended_working_set(metal):
    assert WiredLimit().raise_to(20 * GB) == MAX_WORKING_SET
    metal.set_wired_limit.assert_called_once_with(MAX_WORKING_SET)


def test_restore_puts_back_the_limit_from_before_the_first_raise(metal):
    wired = WiredLimit()
    wired.raise_to(2 * GB)
    metal.set_wired_limit.return_value = 2 * GB  # a model switch: the current limit is Chinwag's own
    wired.raise_to(3 * GB)
    wired.restore()
    assert metal.set_wired_limit.call_args_list == [mock.call(2 * GB), mock.call(3 * GB), mock.call(BEFORE)]
    wired.restore()  # twice: nothing more
    assert metal.set_wired_limit.call_count == 3


def test_nothing_changes_without_metal(monkeypatch):
    setter = mock.Mock(spec=mx.set_wired_limit)
    monkeypatch.setattr(mx.metal, "is_available", mock.Mock(spec=mx.metal.is_available, return_value=False))
    monkeypatch.setattr(mx, "set_wired_limit", setter)
    wired = WiredLimit()
    assert wired.raise_to(2 * GB) == 0
    wired.restore()
    setter.assert_not_called()


def test_the_engine_wires_weights_and_caches_while_loaded_and_restores_at_close(metal, engine_with, tiny_model_path):
    limit = 1 << 30

    async def body(engine):
        return (await engine.memory_stats()).budget_bytes, metal.set_wired_limit.call_args_list[:]

    budget, while_loaded = engine_with(body, memory_limit_bytes=limit)
    weights = fit.plan(tiny_model_path, limit).weights
    assert while_loaded == [mock.call(weights + budget)]
    assert metal.set_wired_limit.call_args_list[-1] == mock.call(BEFORE)  # Engine.close put it back
