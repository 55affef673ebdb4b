"""`python -m app.gui.screenshots`: docs/window.png, docs/model-menu.png, docs/welcome.png,
docs/window-dark.png and the pictures of app/gui/screenshot_features.py (code block, versions, catalogue).

Renders the real window on a sample conversation in a throwaway data folder. The
engine is a stand-in that lists the real registry's models (plus two examples) and
reports the starter as loaded, so no model has to be loaded to take the pictures.
"""

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

from engine.models.folders import STARTER_ID
from engine.types import EngineStatus, FinishReason, ModelStatus

SAMPLE_REPLY = """<think>The user wants to reverse a list. Mention slicing and reversed().</think>

## Reversing a list

There are two common ways:

1. **Slicing** makes a new list: `items[::-1]`
2. **`list.reverse()`** reverses in place and returns `None`

```python
items = [1, 2, 3]
print(items[::-1])   # [3, 2, 1]
items.reverse()      # items is now [3, 2, 1]
```

| Way | New list? | Cost |
|---|---|---|
| `items[::-1]` | yes | O(n) memory |
| `items.reverse()` | no | in place |

See the [Python tutorial](https://docs.python.org/3/tutorial/datastructures.html) for more."""

SAMPLE_STATS = {
    "prompt_tokens": 38,
    "reused_tokens": 0,
    "prefilled_tokens": 38,
    "generated_tokens": 164,
    "ttft_s": 0.09,
    "decode_tps": 182.4,
    "prefill_tps": 910.0,
    "kv_capacity": 512,
    "kv_offset": 202,
    "kv_bytes": 4_194_304,
    "context_limit": 8192,
    "finish_reason": FinishReason.STOP,
}


class _ShowcaseEngine:
    """Just enough of the Engine contract to render the window without loading a model."""

    def __init__(self):
        from engine.models import registry
        from engine.turns import Turns
        from engine.types import ModelInfo

        models = registry.list_models()
        models += [
            ModelInfo(
                "mlx-community/Qwen3-4B-4bit",
                "Qwen3-4B-4bit",
                "",
                "qwen3",
                2_260_000_000,
                "4-bit",
                40960,
                source="hf-cache",
            ),
            ModelInfo(
                "old-model",
                "broken-model",
                "",
                status=ModelStatus.UNUSABLE,
                reason="config.json is missing",
                source="folder",
            ),
        ]
        self.models = models
        self.current_model = models[0]
        self.turns = Turns()  # no turn runs: the window follows none

    @property
    def state(self):
        from engine.types import EngineState

        return EngineState(EngineStatus.READY, self.current_model, kv_bytes_total=4_194_304)

    async def start(self):
        pass

    async def list_models(self):
        return self.models

    async def load_model(self, spec, progress=None):
        return self.current_model

    async def close(self):
        pass

    def stop(self, conv_id=None):
        pass


def _fill(store):
    for title, user, reply in (
        ("Packing list for a weekend hike", "What should I pack for a weekend hike?", "A map, water, layers…"),
        ("Explain KV caches", "Why does a KV cache speed up generation?", "It keeps attention keys and values…"),
    ):
        conv = store.create_conversation(title)
        store.add_message(conv.id, "user", user)
        store.add_message(conv.id, "assistant", reply, stats=SAMPLE_STATS)
    conv = store.create_conversation()
    store.add_message(conv.id, "user", "How do I reverse a list in Python?")
    store.add_message(conv.id, "assistant", SAMPLE_REPLY, model_id=STARTER_ID, stats=SAMPLE_STATS)
    store.set_state("last_conversation", conv.id)


def take(out_dir: Path, dark: bool = False) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["CHINWAG_HOME"] = tempfile.mkdtemp(prefix="chinwag-shots-")
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QPainter
    from PySide6.QtWidgets import QApplication

    import qasync

    app = QApplication.instance() or QApplication(["chinwag"])
    assert isinstance(app, QApplication)  # a widgets app: any earlier instance is one too
    app.setApplicationName("Chinwag")
    if dark:  # the whole set in the dark theme of Preferences
        from app.gui import theme

        app.setStyle("Fusion")
        theme.apply("dark")
    suffix = "-dark" if dark else ""
    loop = qasync.QEventLoop(app)
    asyncio.set_event_loop(loop)
    from app.core.store import Store
    from app.gui.window import MainWindow

    store = Store()
    _fill(store)
    window = MainWindow(store, _ShowcaseEngine())
    window.resize(1180, 860)
    window.show()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []

    async def shoot():
        await window.start_engine(STARTER_ID)
        window.composer.set_text("Can you also show reversed()?")
        await asyncio.sleep(0.3)
        window.chat_view.scroll_to_bottom()
        await asyncio.sleep(0.1)
        path = out_dir / f"window{suffix}.png"
        window.grab().save(str(path))
        written.append(path)

        menu = window.model_menu
        bar = window.menuBar()
        at = bar.actionGeometry(menu.menuAction()).bottomLeft()
        menu.popup(bar.mapToGlobal(at))
        await asyncio.sleep(0.3)
        shot = window.grab()
        painter = QPainter(shot)
        painter.drawPixmap(window.mapFromGlobal(menu.mapToGlobal(QPoint(0, 0))), menu.grab())
        painter.end()
        menu.hide()
        path = out_dir / f"model-menu{suffix}.png"
        shot.save(str(path))
        written.append(path)
        from app.gui.screenshot_features import shoot_features

        written.extend(await shoot_features(window, store, out_dir, suffix))

        # A newcomer's first view: the welcome state of an empty chat.
        conv_id = window.chat.conv_id
        window.chat.new_conversation()
        await asyncio.sleep(0.2)
        path = out_dir / f"welcome{suffix}.png"
        window.grab().save(str(path))
        written.append(path)

        if not dark:  # the same conversation in the dark theme (Preferences › Theme)
            from app.gui import theme

            theme.apply("dark")
            window.setStyleSheet(window.styleSheet())
            window.chat.open_conversation(conv_id)
            window.composer.set_text("Can you also show reversed()?")
            await asyncio.sleep(0.3)
            window.chat_view.scroll_to_bottom()
            await asyncio.sleep(0.1)
            path = out_dir / "window-dark.png"
            window.grab().save(str(path))
            written.append(path)
            theme.apply("system")

    with loop:
        loop.run_until_complete(shoot())
        window.close()
    store.close()
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "docs"))
    parser.add_argument("--dark", action="store_true", help="use a dark palette (writes *-dark.png)")
    args = parser.parse_args(argv)
    for path in take(Path(args.out), args.dark):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
