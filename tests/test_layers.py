"""The import layers run one way: data → models → methods → training → evaluation → tracking →
tasks → cli. ``graphssl.utils`` is the base every layer may import; evaluation never imports
methods or training; only tracking imports MLflow; and inside a layer no modules import each
other in a circle. Checked from every module's imports (those inside functions and
``TYPE_CHECKING`` blocks included)."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "graphssl"

#: the layers, lowest first; a module may import its own layer and the ones before it
LAYERS = ("data", "models", "methods", "training", "evaluation", "tracking", "tasks", "cli")
#: modules outside the layer folders, and the layer they belong to
TOP_LEVEL = {
    "utils": "base",
    "neighbors": "base",
    "processes": "base",
    "threads": "base",
    "progress": "base",
    "package": "base",
    "_startup": "base",
    "__init__": "base",
    "cli": "cli",
    "__main__": "cli",
}
#: evaluation consumes tensors: it never imports a method or the trainer
EVALUATION_NEVER = ("methods", "training")

#: (importing module, imported layer) edges that break the order on purpose (none)
ALLOWED: set[tuple[str, str]] = set()


#: modules that import each other on purpose: the Trainer's ``checkpoint_every`` shorthand adds a
#: ModelCheckpoint callback (as Lightning's Trainer adds its default one), which is a Callback
CIRCLES = {frozenset({"graphssl.training.trainer", "graphssl.training.callbacks.checkpoint"})}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts = parts[:-1] if len(parts) > 2 else [*parts[:-1], "__init__"]
    return ".".join(parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) < 2:
        return "base"
    head = parts[1]
    if head in LAYERS:
        return head
    return TOP_LEVEL.get(head, "unknown")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _rank(layer: str) -> int:
    return -1 if layer == "base" else LAYERS.index(layer)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _name(p))
def test_imports_run_one_way(path: Path) -> None:
    module = _name(path)
    own = _layer(module)
    assert own != "unknown", f"{module} is in no layer; add it to LAYERS or TOP_LEVEL"
    wrong = []
    for imported in sorted(_imports(path)):
        if not imported.startswith("graphssl."):
            continue
        layer = _layer(imported)
        if layer == "unknown" or (module, layer) in ALLOWED:
            continue
        if _rank(layer) > _rank(own) or (own == "evaluation" and layer in EVALUATION_NEVER):
            wrong.append(f"{imported} ({layer})")
    assert not wrong, f"{module} ({own}) imports a later layer: {wrong}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: _name(p))
def test_only_tracking_imports_mlflow(path: Path) -> None:
    module = _name(path)
    if _layer(module) == "tracking":
        return
    mlflow = sorted(i for i in _imports(path) if i == "mlflow" or i.startswith("mlflow."))
    assert not mlflow, f"{module} imports {mlflow}; only graphssl.tracking may import MLflow"


def test_the_allow_list_names_real_edges() -> None:
    """An allowed edge that no longer exists should leave the list."""
    present = set()
    for path in _modules():
        module = _name(path)
        present.update((module, _layer(i)) for i in _imports(path) if i.startswith("graphssl."))
    stale = sorted(edge for edge in ALLOWED if edge not in present)
    assert not stale, f"these allowed edges are gone; remove them from ALLOWED: {stale}"


def _module_imports(path: Path, modules: set[str]) -> set[str]:
    """The graphssl modules ``path`` imports: ``from a.b import c`` is module ``a.b.c`` when
    there is one (a package's ``__init__`` that only hands ``c`` on is not a step), else
    ``a.b``."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in modules:
                    out.add(sub)
                elif node.module in modules:
                    out.add(node.module)
    return out


def _circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    counter = itertools.count()
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = next(counter)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return found


def test_no_modules_import_each_other_in_a_circle() -> None:
    paths = {_name(p): p for p in _modules()}
    graph = {m: _module_imports(p, set(paths)) - {m} for m, p in paths.items()}
    circles = set(_circles(graph))
    new = sorted(sorted(c) for c in circles - CIRCLES)
    assert not new, f"these modules import each other in a circle: {new}"
    gone = sorted(sorted(c) for c in CIRCLES - circles)
    assert not gone, f"these allowed circles are gone; remove them from CIRCLES: {gone}"


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b", "c"})]
