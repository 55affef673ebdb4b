"""Pictures of issue 7's features for `python -m app.gui.screenshots`: a highlighted code
block, a reply with versions (‹ 2/2 ›) and the download dialog's catalogue."""

import asyncio
from pathlib import Path

from engine.models.folders import STARTER_ID

VERSIONS_QUESTION = "Give me a one-line Python function that squares a number."
VERSIONS = [
    "Use a lambda: `square = lambda x: x * x`",
    "Here is one:\n\n```python\ndef square(x: float) -> float:\n    return x ** 2  # also works for ints\n```",
]
SAMPLE_STATS = {"generated_tokens": 31, "decode_tps": 176.0, "ttft_s": 0.08, "finish_reason": "stop"}


async def shoot_features(window, store, out_dir: Path, suffix: str = "") -> list[Path]:
    from app.gui.chat.markdown_view import CodeBlock

    written = []
    original = window.chat.conv_id  # shown again at the end, for the pictures taken after these
    # A highlighted code block: the last reply's first code block, with its message.
    reply = window.chat_view.message_widgets()[-1]
    code = next((w for w in reply.body.widgets() if isinstance(w, CodeBlock)), None)
    if code is not None:
        window.chat_view.ensureWidgetVisible(code)
        await asyncio.sleep(0.2)
        path = out_dir / f"code-block{suffix}.png"
        code.grab().save(str(path))
        written.append(path)

    # A reply with two versions, the second shown.
    conv = store.create_conversation("Square a number")
    question = store.add_message(conv.id, "user", VERSIONS_QUESTION)
    for text in VERSIONS:
        store.add_message(conv.id, "assistant", text, model_id=STARTER_ID, stats=SAMPLE_STATS, parent_id=question.id)
    window.chat.refresh_list()
    window.chat.open_conversation(conv.id)
    window.composer.set_text("")
    await asyncio.sleep(0.3)
    path = out_dir / f"versions{suffix}.png"
    window.grab().save(str(path))
    written.append(path)

    # The download dialog's catalogue.
    dialog = window.dialogs.download_dialog()
    dialog.resize(760, 620)
    await asyncio.sleep(0.3)
    path = out_dir / f"catalogue{suffix}.png"
    dialog.grab().save(str(path))
    written.append(path)
    dialog.reject()

    store.delete_conversation(conv.id)
    window.chat.refresh_list()
    window.chat.open_conversation(original)
    return written
