"""The command line's argument parser: a bad flag is one line, not a usage block."""

import argparse
import sys
from typing import NoReturn

PROG = "chinwag"
# --model's help, for every subcommand that takes one.
MODEL_HELP = "registry id, MLX folder, GGUF file, or a server's model: URL, URL#MODEL or NAME/MODEL"


def fail(message: str) -> int:
    """Bad input's one line on stderr; returns the exit status it means (2)."""
    print(f"{PROG}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line that says where the usage is (exit status 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        sys.exit(status)
