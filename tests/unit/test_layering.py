"""The tree's import rules, checked on the source: imports only go down the layers.

``streaming`` (Spark) uses ``compactor``; never the reverse.
Inside ``compactor`` the subpackages form layers, lowest first; a module may import its own
layer or lower ones. A cycle between two subpackages would show up here as an upward import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("compactor", "streaming")
# Lowest first. ``compactor`` itself (its __init__) re-exports the lake's readers.
LAYERS = [
    {"compactor.positions", "compactor.tasks"},
    {"compactor.exceptions"},
    {"compactor.kafka"},
    {"compactor.formats"},
    {"compactor.lake"},
    {"compactor.config"},
    {"compactor.ingest", "compactor.erasure"},
    {"compactor.cleaner"},
    {"compactor", "compactor.ops"},
    {"compactor.demo"},
    {"compactor.cli", "compactor.__main__"},
    {"streaming"},
]


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[0] == "compactor" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def _rank(module: str) -> int:
    unit = _unit(module)
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def _imports() -> list[tuple[str, str, int]]:
    found = []
    for package in OURS:
        for path in sorted((ROOT / package).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            module = module.removesuffix(".__init__")
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    targets = [node.module]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                else:
                    continue
                found += [(module, t, node.lineno) for t in targets if t.split(".")[0] in OURS]
    return found


def test_every_package_has_a_layer() -> None:
    for module, target, _ in _imports():
        _rank(module), _rank(target)  # raises StopIteration for a unit without a layer


@pytest.mark.parametrize("package", OURS)
def test_nothing_imports_upward(package: str) -> None:
    upward = [f"{m}:{line} imports {t}" for m, t, line in _imports()
              if m.split(".")[0] == package and _rank(t) > _rank(m)]
    assert upward == []


def test_compactor_never_imports_streaming() -> None:
    assert [(m, t) for m, t, _ in _imports()
            if m.startswith("compactor") and t.startswith("streaming")] == []


def _module_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, target, _ in _imports():
        graph.setdefault(module, set()).add(target)
    return graph


def test_no_two_modules_import_each_other() -> None:
    """Layers catch circles between packages; this one catches them inside a package."""
    graph = _module_graph()
    circles = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets
                      if a != b and a in graph.get(b, set()) and b != a.rsplit(".", 1)[0]
                      and a != b.rsplit(".", 1)[0]})
    assert circles == []


MAX_MODULE_LINES = 450


@pytest.mark.parametrize("package", OURS)
def test_every_module_stays_small(package: str) -> None:
    """One module per idea: a module past the limit holds two and should be split."""
    long = {str(path.relative_to(ROOT)): n for path in (ROOT / package).rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
