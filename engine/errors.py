"""The one error type that front ends show to users as a single line."""

import re

# C0/C1 control characters (ESC, CSI...): a hostile file name or GGUF field must not drive the terminal.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")


def one_line(text: object) -> str:
    """text on one line, without control characters, for a terminal or a banner."""
    return " ".join(_CONTROLS.sub(" ", str(text)).split())


class ChinwagError(Exception):
    """A user-facing failure: the message says what went wrong and where, in one line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class ModelError(ChinwagError):
    """A model file or folder that cannot be used."""


class DoesNotFitError(ChinwagError):
    """A model whose weights and a short chat do not fit the memory limit. Its text names the CLI's
    flags; `advice` says the same naming a front end's own settings."""

    CLI = ("--kv-bits", "--memory-limit")  # where the command line sets the KV cache and the limit

    def __init__(self, what: str, quantized: bool) -> None:
        self.what, self.quantized = one_line(what), quantized
        super().__init__(self.advice(*self.CLI))

    def advice(self, cache_setting: str, limit_setting: str) -> str:
        cache = "fewer bits" if self.quantized else "8 or 4 bits"
        return (
            f"{self.what}; try a smaller model, a KV cache of {cache} ({cache_setting}),"
            f" or a higher memory limit ({limit_setting})"
        )


class ContextOverflowError(ChinwagError):
    """A prompt that cannot fit in the model's context even after dropping old turns."""


class CancelledDownload(ChinwagError):
    """A download the user cancelled."""
