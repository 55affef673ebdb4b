"""app/core/settings.py is the settings model without Qt: the dialog only shows it."""

import subprocess
import sys

from tests.conftest import ROOT


def test_the_settings_model_never_imports_qt():
    script = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "from app.core import settings\n"
        "values = settings.effective({'temperature': 0.2, 'top_k': 'bad'}, settings.builtin_defaults())\n"
        "assert settings.params_from_settings(values).temperature == 0.2\n"
        "assert settings.settings_problems({'top_k': 'bad'})\n"
        "assert not [m for m in sys.modules if m.startswith('PySide6')], 'Qt was imported'\n"
    )
    subprocess.run([sys.executable, "-c", script, str(ROOT)], check=True, timeout=60)


def test_engine_messages_keep_tool_rounds(store):
    """A reply's calls and each result go back to the model as the terminal chat and the window store them;
    a `tool` message that answers no call, or calls that are not a list of objects, do not."""
    from app.core.settings import engine_messages

    conv = store.create_conversation()
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2}'}}
    store.add_message(conv.id, "user", "2 plus 3?")
    store.add_message(conv.id, "assistant", "<tool_call>…</tool_call>", stats={"tool_calls": [call]})
    store.add_message(conv.id, "tool", "5.0", stats={"tool_call_id": "call_1", "name": "add"})
    store.add_message(conv.id, "tool", "stray")
    store.add_message(conv.id, "assistant", "5", stats={"tool_calls": "not a list"})
    sent = engine_messages(store.get_conversation(conv.id).messages, "")
    assert sent == [
        {"role": "user", "content": "2 plus 3?"},
        {"role": "assistant", "content": "<tool_call>…</tool_call>", "tool_calls": [call]},
        {"role": "tool", "content": "5.0", "tool_call_id": "call_1", "name": "add"},
        {"role": "assistant", "content": "5"},
    ]
