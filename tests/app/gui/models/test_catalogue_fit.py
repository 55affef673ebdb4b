"""The download dialog's catalogue judges fit as the engine does (issue 32 item 6): the Plan that
refuses a model before loading it, against the memory limit (Preferences) and the model's KV
setting, with the reason; Download still works after a warning the user confirms (as LM Studio)."""

import json
import struct

import pytest
from PySide6.QtWidgets import QMessageBox

from app.gui.models.download_dialog import FIT, NAME, REPO_ROLE, CatalogueDownloadDialog, fit_options
from app.gui.settings.preferences import APP_KEY
from engine.errors import ChinwagError
from engine.models import fit
from engine.models.catalogue import load_catalogue
from engine.types import KVQuantization
from tests.app.gui.test_bad_input import make_window
from tests.app_helpers import FakeEngine, run

pytestmark = pytest.mark.qt

QWEN = "mlx-community/Qwen3-8B-4bit"  # 8.2 B parameters at 4 bits: about 5 GB of weights here


def rows(dialog) -> dict:
    tree = dialog.catalogue
    return {tree.topLevelItem(i).data(NAME, REPO_ROLE): tree.topLevelItem(i) for i in range(tree.topLevelItemCount())}


def opened(qtbot, **options) -> CatalogueDownloadDialog:
    dialog = CatalogueDownloadDialog(ram_bytes=32 << 30, bandwidth=10e9, cpu=True, **options)
    qtbot.addWidget(dialog)
    return dialog


def test_a_model_whose_weights_exceed_the_limit_does_not_fit_and_says_why(qtbot):
    dialog = opened(qtbot, limit=4 * 10**9)
    qwen = rows(dialog)[QWEN]
    assert qwen.text(FIT) == "Does not fit"
    tip = qwen.toolTip(FIT)
    assert tip.startswith("Qwen3 8B does not fit in memory: it needs ") and "there is 4.0 GB" in tip
    assert tip.endswith(
        "try a smaller model, a KV cache of 8 or 4 bits (Preferences › KV cache), or a higher memory limit"
        " (Preferences › Memory limit)."
    )
    assert "\n" not in tip
    assert qwen.foreground(NAME).color() == dialog.palette().placeholderText().color()  # greyed
    small = rows(dialog)["mlx-community/Qwen3.5-0.8B-4bit"]
    assert small.text(FIT).startswith("Fits") and small.foreground(NAME).color() != qwen.foreground(NAME).color()
    # The same units as the reason (and as the setting reads them): 4GB is 4.0 GB.
    assert "models may use 4.0 GB here: Preferences › Memory limit" in dialog.intro.text()


def test_with_a_big_limit_every_model_fits(qtbot):
    dialog = opened(qtbot, limit=64 << 30)
    assert {row.text(FIT).split(" · ")[0] for row in rows(dialog).values()} == {"Fits"}
    assert "models may use 68.7 GB, which holds about" in rows(dialog)[QWEN].toolTip(FIT)


def test_the_kv_setting_a_model_would_get_is_counted(qtbot):
    """Just under what Qwen3 8B needs at full precision: its 8-bit KV setting (by repo) makes it fit."""
    qwen = next(e for e in load_catalogue() if e.repo == QWEN)
    limit = qwen.plan(1, None).needs(fit.MINIMAL_CHAT_TOKENS) - 1
    assert qwen.plan(limit, KVQuantization(8, 64)).reason(None) == ""
    assert rows(opened(qtbot, limit=limit))[QWEN].text(FIT) == "Does not fit"
    eight = opened(qtbot, limit=limit, kv=lambda repo: KVQuantization(8, 64) if repo == QWEN else None)
    assert rows(eight)[QWEN].text(FIT).startswith("Fits")


def sized_like(path, entry) -> None:
    """A model folder of the entry's sizes (a sparse 4-bit safetensors file and its config figures)."""
    params = round(entry.params_b * 1e9)
    rows_, columns = 1000, params // 1000
    tensors = {
        "w.weight": ("U32", [rows_, columns * entry.bits // 32], 4),
        "w.scales": ("BF16", [rows_, columns // 64], 2),
        "w.biases": ("BF16", [rows_, columns // 64], 2),
    }
    header, offset = {}, 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + shape[0] * shape[1] * size]}
        offset = header[name]["data_offsets"][1]
    raw = json.dumps(header).encode()
    path.mkdir()
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)  # sparse: nothing written past the header
    config = fit.figures_config(entry.config, "linear_attention")
    (path / "config.json").write_text(json.dumps({**config, "quantization": {"bits": entry.bits, "group_size": 64}}))


def test_the_verdict_is_the_one_a_load_would_give_for_the_same_sizes(qtbot, tmp_path):
    qwen = next(e for e in load_catalogue() if e.repo == QWEN)
    sized_like(tmp_path / "qwen", qwen)
    need = fit.plan(tmp_path / "qwen", 1 << 40, None, qwen.name).needs(fit.MINIMAL_CHAT_TOKENS)
    for limit in (need - 1, need, 4 * 10**9, 16 * 10**9):
        row = rows(opened(qtbot, limit=limit))[QWEN]
        try:
            fit.plan(tmp_path / "qwen", limit, None, qwen.name).check(None)  # what Session.load runs first
        except ChinwagError as refused:
            assert row.text(FIT) == "Does not fit"
            assert row.toolTip(FIT).split("; try ")[0] == str(refused).split("; try ")[0]
        else:
            assert row.text(FIT).startswith("Fits"), limit


def test_download_of_a_model_that_does_not_fit_asks_first(qtbot):
    dialog = opened(qtbot, limit=4 * 10**9)
    dialog.show()
    requested = []
    dialog.downloadRequested.connect(requested.append)
    dialog.catalogue.setCurrentItem(rows(dialog)[QWEN])
    assert dialog.message.text().startswith("Qwen3 8B does not fit in memory")
    assert dialog.message.text().endswith("You can still download it.")
    dialog.start_button.click()
    box = dialog.confirm
    assert box is not None and box.isVisible() and box.text().startswith("Qwen3 8B does not fit in memory")
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert requested == [] and not dialog.running and dialog.confirm is None
    dialog.start_button.click()
    anyway = next(b for b in dialog.confirm.buttons() if b.text() == "Download Anyway")
    with qtbot.waitSignal(dialog.downloadRequested) as sig:
        anyway.click()
    assert sig.args == [QWEN] and dialog.running
    # One that fits downloads at once, and picking it clears the other's note.
    other = opened(qtbot, limit=4 * 10**9)
    other.catalogue.setCurrentItem(rows(other)[QWEN])
    other.catalogue.setCurrentItem(rows(other)["mlx-community/Qwen3.5-0.8B-4bit"])
    assert other.message.text() == ""
    with qtbot.waitSignal(other.downloadRequested):
        other.start_button.click()
    assert other.confirm is None


def test_the_preferences_memory_limit_and_kv_setting_reach_the_dialog():
    options = fit_options({"memory_limit": "4GB", "kv_cache": {QWEN: {"bits": 8, "group_size": 64}}}, 0)
    assert options["limit"] == 4 * 10**9 and options["kv"](QWEN) == KVQuantization(8, 64) and options["kv"]("x") is None
    bad = fit_options({"memory_limit": "banana", "kv_cache": {QWEN: {"bits": 7}}}, 0)
    assert bad["limit"] is None and bad["kv"](QWEN) is None  # as if unset: the load itself says what is wrong


def test_the_window_opens_the_catalogue_with_the_preferences_limit(qtbot, qloop, store):
    store.set_state(APP_KEY, {"memory_limit": "4GB"})
    w = make_window(qtbot, store, FakeEngine())
    try:
        dialog = w.dialogs.download_dialog()
        assert dialog.limit == 4 * 10**9 and dialog.limit_given
        assert rows(dialog)[QWEN].text(FIT) == "Does not fit"
        dialog.reject()
    finally:
        w.close()
        run(qtbot, w.shutdown())


def test_without_a_setting_the_limit_is_the_engines_default(qtbot, qloop, store, monkeypatch):
    monkeypatch.setattr(fit, "available_bytes", lambda: 3 * 10**9)
    w = make_window(qtbot, store, FakeEngine())
    try:
        weights = w.bridge.engine.state.weight_bytes  # the loaded model's, counted back as a load would
        dialog = w.dialogs.download_dialog()
        assert dialog.limit == 3 * 10**9 + weights and not dialog.limit_given
        dialog.reject()
    finally:
        w.close()
        run(qtbot, w.shutdown())
