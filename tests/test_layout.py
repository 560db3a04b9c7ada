"""The package's shape: the library never imports the lab (lit_otclust.lab), and no module imports itself back."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "lit_otclust"
# The lab's command line under the name the study files, records and reports cite: part of the lab.
LAB_ALIASES = {"lit_otclust.experiments"}


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports anywhere (top level or inside a function), by name."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def _graph() -> dict[str, set[str]]:
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imports(path, set(paths)) - {name} for name, path in paths.items()}


def _is_lab(name: str) -> bool:
    return name.startswith("lit_otclust.lab") or name in LAB_ALIASES


def _lab_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Each library module that imports the lab, with what it imports of it."""
    wrong = {name: sorted(filter(_is_lab, deps)) for name, deps in graph.items() if not _is_lab(name)}
    return {name: deps for name, deps in wrong.items() if deps}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    # A package's __init__ runs on the way to each of its modules: an edge up to it is no dependency of note.
    graph = {name: {d for d in deps if not name.startswith(d + ".")} for name, deps in graph.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> list[str] | None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name, [name])):
            return found
    return None


def test_the_library_never_imports_the_lab():
    graph = _graph()
    assert "lit_otclust.lab.runner" in graph["lit_otclust.lab.experiments"]  # the walk sees the lab's own imports
    assert _lab_imports(graph) == {}
    graph["lit_otclust.system"] = graph["lit_otclust.system"] | {"lit_otclust.lab.stats"}
    assert _lab_imports(graph) == {"lit_otclust.system": ["lit_otclust.lab.stats"]}


def test_the_import_graph_has_no_cycle():
    graph = _graph()
    assert _cycle(graph) is None
    graph["lit_otclust.wandb_run"] = graph["lit_otclust.wandb_run"] | {"lit_otclust.figures"}  # the old circle
    assert _cycle(graph) == ["lit_otclust.figures", "lit_otclust.wandb_run", "lit_otclust.figures"]
