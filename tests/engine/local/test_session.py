"""engine/local/session.py: a turn's reply text is collected once, and is what the history records."""

from engine.local.session import Session
from engine.types import GenerationParams, TextDelta


def test_the_returned_text_is_the_emitted_text_and_the_recorded_reply(tiny_model_path, chinwag_home):
    session = Session()
    session.load(str(tiny_model_path))
    messages = [{"role": "user", "content": "Hello there"}]
    events = []
    result = session.chat("c", messages, GenerationParams(temperature=0.0, max_tokens=12), lambda: False, events.append)
    assert result.text == "".join(e.text for e in events if isinstance(e, TextDelta))
    assert result.stats.generated_tokens == len(result.stats.reply_ids) > 0
    recorded = session.caches.get("c").history.spans[len(messages)]
    assert recorded.role == "assistant" and recorded.content == result.text
