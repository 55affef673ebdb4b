"""GenerationParams is the one source of the sampling settings: the CLI flags, the settings
keys and defaults, and the settings dialog are all made from its fields."""

import dataclasses
import json
import os
import subprocess
import sys
import textwrap

import pytest

from engine.errors import ChinwagError
from engine.types import GenerationParams, param_specs
from tests.conftest import ROOT


def test_every_field_has_a_flag_a_setting_and_the_same_default(capsys):
    from app.cli.main import _params, build_parser
    from app.core.settings import KEYS, builtin_defaults, params_from_settings

    # Every numeric field; the two switches of speculative decoding have flags of their own, and
    # tools, continuing a reply and logits processors are given per turn, not by settings.
    others = ("speculative", "draft_model", "tools", "continue_reply", "logits_processors", "response_format")
    names = [f.name for f in dataclasses.fields(GenerationParams) if f.name not in others]
    assert [s.name for s in param_specs()] == names
    args = build_parser().parse_args(["chat"])
    assert _params(args) == GenerationParams()
    assert {*names, "speculative", "draft_model"} <= set(KEYS)
    assert params_from_settings(builtin_defaults()) == GenerationParams()
    # replay keeps its own default temperature, every other default is the dataclass's
    replay = _params(build_parser().parse_args(["replay", "s.json", "--model", "m"]))
    assert replay == dataclasses.replace(GenerationParams(), temperature=0.0)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["chat", "--help"])
    help_text = capsys.readouterr().out
    assert all("--" + n.replace("_", "-") in help_text for n in names)


def test_flags_parse_to_the_fields_types_and_refuse_values_out_of_range(capsys):
    from app.cli.main import _params, build_parser, main

    args = build_parser().parse_args(
        ["chat", "--top-k", "40", "--seed", "7", "--context-cap", "2048", "--temperature", "0.25"]
    )
    assert _params(args) == GenerationParams(temperature=0.25, top_k=40, seed=7, context_cap=2048)
    for flag, value in [
        ("--temperature", "hot"),
        ("--temperature", "9"),
        ("--top-k", "1.5"),
        ("--context-cap", "0"),
        ("--max-tokens", "nan"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            main(["replay", "script.json", "--model", "m", flag, value])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err.startswith(f"chinwag replay: error: argument {flag}: ") and repr(value) in err


def test_bad_stored_settings_are_a_one_line_error_naming_the_key():
    from app.core.settings import builtin_defaults, params_from_settings

    for key, value in [
        ("temperature", "hot"),
        ("max_tokens", 0),
        ("top_p", [1]),
        ("seed", -3),
        ("repetition_penalty", float("inf")),
        ("top_k", True),
    ]:
        with pytest.raises(ChinwagError, match=f"chat settings: {key} must be"):
            params_from_settings({**builtin_defaults(), key: value})
    # Older settings wrote context_cap 0 for "the model's limit"; numbers as text still read.
    params = params_from_settings({**builtin_defaults(), "context_cap": 0, "temperature": "0.5"})
    assert params == GenerationParams(temperature=0.5)


@pytest.mark.qt
def test_the_dialog_has_a_field_per_param_and_round_trips_them(qtbot):
    from app.core.settings import builtin_defaults, overrides, params_from_settings
    from app.gui.settings.dialog import SettingsDialog

    defaults = builtin_defaults()
    dialog = SettingsDialog(defaults, defaults, "Preferences")
    qtbot.addWidget(dialog)
    assert list(dialog.fields) == [s.name for s in param_specs()]
    assert params_from_settings(dialog.values()) == GenerationParams()
    assert overrides(dialog.values(), defaults) == dict.fromkeys(overrides(defaults, defaults))
    wanted = GenerationParams(
        temperature=1.25,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        max_tokens=64,
        seed=0,
        context_cap=1024,
    )
    dialog.set_values({"system_prompt": "Be brief", **dataclasses.asdict(wanted)})
    assert dialog.fields["seed"].text() == "0" and dialog.fields["context_cap"].text() == "1024"
    assert params_from_settings(dialog.values()) == wanted
    # A stored value the dialog cannot show opens as the default instead of failing.
    dialog.set_values({**defaults, "temperature": "hot", "context_cap": 0})
    assert dialog.values()["temperature"] == 0.7 and dialog.values()["context_cap"] is None
    assert dialog.fields["context_cap"].text() == "model's limit" and dialog.fields["seed"].text() == "random"


NEW_FIELD = textwrap.dedent("""
    import dataclasses, json, sys
    import engine, engine.types as types

    @dataclasses.dataclass(frozen=True)
    class Params(types.GenerationParams):
        presence_penalty: float = types._param(0.25, "a new sampling setting", 0.0, 2.0)

    types.GenerationParams = engine.GenerationParams = Params

    from PySide6.QtWidgets import QApplication
    from app.cli.main import _params, build_parser
    from app.core.settings import KEYS, builtin_defaults, params_from_settings
    from app.gui.settings.dialog import SettingsDialog

    app = QApplication([])
    args = build_parser().parse_args(["chat", "--presence-penalty", "1.5"])
    dialog = SettingsDialog(builtin_defaults(), builtin_defaults(), "Preferences")
    dialog.fields["presence_penalty"].setValue(0.5)
    print(json.dumps({
        "cli": _params(args).presence_penalty,
        "key": "presence_penalty" in KEYS,
        "default": builtin_defaults()["presence_penalty"],
        "dialog": params_from_settings(dialog.values()).presence_penalty,
    }))
""")


def test_a_new_field_appears_in_the_cli_the_settings_and_the_dialog():
    done = subprocess.run(
        [sys.executable, "-c", NEW_FIELD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "QT_QPA_PLATFORM": "offscreen"},
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"cli": 1.5, "key": True, "default": 0.25, "dialog": 0.5}


@pytest.mark.qt
def test_a_chat_with_a_bad_stored_setting_falls_back_to_the_default_and_sends(qtbot, window, store, engine):
    from tests.app_helpers import send

    bad = store.create_conversation(settings={"temperature": "hot"})
    window.chat.open_conversation(bad.id)
    send(qtbot, window, "Hello")
    qtbot.waitUntil(lambda: window.chat.gen is None)
    assert [m.role for m in store.get_conversation(bad.id).messages] == ["user", "assistant"]
    assert len(engine.calls) == 1 and engine.calls[0][2] == GenerationParams()
    dialog = window.dialogs.chat_settings_dialog()
    assert dialog.values()["temperature"] == 0.7  # opens on the default, to be saved over
    dialog.reject()
