"""The one error type that front ends show to users as a single line."""


class ChinwagError(Exception):
    """A user-facing failure: the message says what went wrong and where, in one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class ModelError(ChinwagError):
    """A model file or folder that cannot be used."""


class ContextOverflowError(ChinwagError):
    """A prompt that cannot fit in the model's context even after dropping old turns."""


class CancelledDownload(ChinwagError):
    """A download the user cancelled."""
