"""engine/local/loading.py: what loading adds to mlx-lm's own load."""

import logging

from engine.local import loading


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_text_longer_than_the_models_maximum_prints_no_transformers_warning(tiny_model_path):
    records = _Records()
    logging.getLogger("transformers").addHandler(records)  # its own handler prints to stderr; it does not propagate
    try:
        _, tokenizer = loading.load(tiny_model_path)
        tokenizer._tokenizer.model_max_length = 8  # the document is longer than this "model's maximum"
        assert len(tokenizer.encode("the quick brown fox jumps over the lazy dog " * 20)) > 8
    finally:
        logging.getLogger("transformers").removeHandler(records)
    assert not [m for m in records.messages if "Token indices sequence length" in m]
