"""engine/remote's modules import one another without a cycle (servers never needs the backend)."""

import ast
from pathlib import Path

import engine.remote

FOLDER = Path(engine.remote.__file__).parent


def imports_of(path: Path) -> set[str]:
    """The engine.remote modules a file imports, at its top or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "engine.remote":
                found.update(alias.name for alias in node.names)
            elif node.module.startswith("engine.remote."):
                found.add(node.module.removeprefix("engine.remote."))
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("engine.remote.") for a in node.names if a.name.startswith("engine.remote.")
            )
    return found


def test_no_import_cycle_in_engine_remote():
    graph = {p.stem: imports_of(p) for p in FOLDER.glob("*.py") if p.stem != "__init__"}
    assert "backend" not in graph["servers"]

    def reaches(start: str, target: str, seen: set) -> bool:
        for name in graph.get(start, ()):
            if name == target or (name not in seen and reaches(name, target, seen | {name})):
                return True
        return False

    cycles = [name for name in graph if reaches(name, name, {name})]
    assert cycles == []
