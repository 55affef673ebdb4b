"""One turn through an engine, collected: the helper the engine-level tests share."""

from engine import GenerationParams, TextDelta, TurnStats


async def collect(engine, conv, messages, params: GenerationParams) -> tuple[str, TurnStats | None]:
    """(the reply's text, its TurnStats, or None if the turn sent none)."""
    text, stats = "", None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            text += ev.text
        elif isinstance(ev, TurnStats):
            stats = ev
    return text, stats
