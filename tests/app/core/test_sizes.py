"""One way to write a size: the window's Model menu and `chinwag models` show the same text."""

import json

import pytest

from app.cli.main import main
from app.core.sizes import format_bytes


@pytest.mark.parametrize(
    "n, text",
    [
        (0, "0 B"),
        (None, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KB"),
        (1536, "1.5 KB"),
        (119_000_000, "113.5 MB"),
        (4 << 30, "4.0 GB"),
        (2 << 40, "2048.0 GB"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


def test_cli_and_model_menu_write_a_model_size_the_same_way(tiny_model_path, capsys):
    from app.gui.models.menu import describe  # Qt-free to call; the module imports Qt
    from engine.models import registry

    registry.add_model_folder(str(tiny_model_path))
    assert main(["models", "--json"]) == 0
    listed = [m for m in json.loads(capsys.readouterr().out) if m["size_bytes"]]
    assert listed
    assert main(["models"]) == 0
    table = capsys.readouterr().out
    infos = {m.id: m for m in registry.list_models()}
    for m in listed:
        size = format_bytes(m["size_bytes"])
        assert size in table and size in describe(infos[m["id"]])
