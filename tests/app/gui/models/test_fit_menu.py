"""Models that do not fit the memory limit are greyed out in the Model menu and the header's picker,
with the engine's reason as their tooltip (issue 32 item 6), instead of failing once chosen."""

import dataclasses

import pytest

from tests.app.gui.test_bad_input import make_window
from tests.app_helpers import FAKE_MODELS, FakeEngine, run

pytestmark = pytest.mark.qt

TOO_BIG = (
    "Fake Huge does not fit in memory: it needs 40.2 GB (weights 40.0 GB and a 2048-token chat), and there is 8.0 GB"
)
HUGE = dataclasses.replace(FAKE_MODELS[1], id="fake-huge", name="Fake Huge", fit_reason=TOO_BIG)


def test_a_model_that_does_not_fit_is_greyed_with_the_reason(qtbot, qloop, store):
    w = make_window(qtbot, store, FakeEngine(models=FAKE_MODELS + [HUGE]))
    try:
        for menu in (w.model_menu, w.model_picker):
            action = menu.action_for("fake-huge")
            assert not action.isEnabled()
            assert action.toolTip().startswith(TOO_BIG + ".\n")
            assert menu.action_for("fake-big").isEnabled()  # one that fits stays choosable
    finally:
        w.close()
        run(qtbot, w.shutdown())
