"""The size limits `make check` keeps on app/ and engine/: no module over 600 lines, no function over
15 by radon's cyclomatic complexity (which counts each `and`/`or`; ruff's C901 does not).

Today's offenders are allowed by name in pyproject.toml, `[tool.chinwag.limits]`. A new offender
fails, and so does an allowed one that no longer offends: its entry goes, so the list only shrinks.
Run from the repository's root: `python .ci/limits.py`.
"""

import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from radon.complexity import add_inner_blocks, cc_visit
from radon.visitors import Function

ROOTS = ("app", "engine")


@dataclass(frozen=True)
class Offender:
    key: str  # "path" for a module, "path:Class.function" for a function (the allow-list's spelling)
    where: str  # path:line
    what: str


def offenders(root: Path, max_lines: int, max_complexity: int) -> list[Offender]:
    found = []
    for top in ROOTS:
        for path in sorted((root / top).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            source = path.read_text(encoding="utf-8")
            lines = len(source.splitlines())
            if lines > max_lines:
                found.append(Offender(name, f"{name}:1", f"{lines} lines (over {max_lines})"))
            for block in add_inner_blocks(cc_visit(source)):
                if isinstance(block, Function) and block.complexity > max_complexity:
                    found.append(
                        Offender(
                            f"{name}:{block.fullname}",
                            f"{name}:{block.lineno}",
                            f"{block.fullname} has complexity {block.complexity} (over {max_complexity})",
                        )
                    )
    return found


def main() -> int:
    root = Path.cwd()
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["chinwag"]["limits"]
    allowed = set(config["modules"]) | set(config["functions"])
    found = offenders(root, config["max_module_lines"], config["max_complexity"])
    new = [o for o in found if o.key not in allowed]
    gone = sorted(allowed - {o.key for o in found})
    for o in new:
        print(f"{o.where}: {o.what}: split it by what it does")
    for key in gone:
        print(f"pyproject.toml: {key} is within the limits now: take it off [tool.chinwag.limits]")
    print(f"limits: {len(found) - len(new)} allowed offenders, {len(new)} new, {len(gone)} to take off the list")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
