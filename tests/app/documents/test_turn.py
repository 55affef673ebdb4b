"""app/documents/turn.py: what a message with documents will take of the context, as the user reads it."""

import pytest

from app.documents.turn import context_share


@pytest.mark.parametrize(
    "tokens, limit, shown",
    [
        (6812, 8192, "83% of the context"),
        (38, 8192, "<1% of the context"),  # seen on X: a short DOCX read "0% of the context"
        (41, 8192, "1% of the context"),
        (8192, 8192, "100% of the context"),
        (0, 8192, "0% of the context"),
    ],
)
def test_context_share(tokens, limit, shown):
    assert context_share(tokens, limit) == shown
