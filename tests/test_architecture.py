"""The package's import graph follows docs/architecture.md: layers import only their own
layer or lower ones, no module imports the package facade, nothing at run time imports the
offline scripts, and there are no import cycles.

Every import counts, also those inside functions (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import os

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: source folder -> dotted package it is installed as (pyproject's package-dir)
SOURCES = {"placement_opt": "placement_opt", "solvers": "placement_opt.solvers", "cli": "placement_opt.cli"}
#: bottom to top, as in docs/architecture.md; a module may import its own layer and lower ones
LAYERS = (
    ("foundation", ("errors", "io", "limits", "progress", "startup", "validation", "version")),
    ("descriptions", ("catalog", "cluster", "hf_config", "model", "profile", "settings", "workload")),
    ("costs", ("costs",)),
    ("parallel", ("parallel",)),
    ("problem", ("instance", "placement", "feasibility", "llm_units", "llm_rules", "llm_export")),
    ("simulate", ("simulate",)),
    ("spaces", ("spaces",)),
    ("solvers", ("solvers",)),
    ("executor", ("executor",)),
    ("plots", ("plots",)),
    ("cli", ("cli",)),
    ("offline", ("offline",)),
)
FACADE = "placement_opt"
OFFLINE = "offline"


def _modules() -> dict[str, str]:
    """Dotted module name -> file path, for every module of the installed package."""
    out = {}
    for folder, package in SOURCES.items():
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), os.path.join(ROOT, folder))[:-3]
                parts = [p for p in rel.split(os.sep) if p != "__init__"]
                out[".".join([package] + parts)] = os.path.join(dirpath, name)
    return out


def _imports(module: str, path: str, modules: dict[str, str]) -> set[str]:
    """The package modules ``module`` imports (a ``from pkg import name`` of a submodule counts
    as that submodule)."""
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    with open(path) as fh:
        tree = ast.parse(fh.read())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(FACADE))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith(FACADE):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    found.discard(module)
    return found


def _layer(module: str) -> int:
    rel = module[len(FACADE) + 1:] if module != FACADE else ""
    head = rel.split(".")[0]
    for i, (_, members) in enumerate(LAYERS):
        if head in members:
            return i
    raise AssertionError(f"module {module} belongs to no layer of docs/architecture.md")


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    modules = _modules()
    g = nx.DiGraph()
    for module, path in modules.items():
        g.add_node(module)
        for target in _imports(module, path, modules):
            g.add_edge(module, target)
    return g


def test_every_module_belongs_to_a_layer(graph):
    for module in graph:
        if module != FACADE:
            _layer(module)


def test_no_upward_imports(graph):
    upward = []
    for src, dst in graph.edges:
        if src == FACADE:
            continue  # the facade re-exports the public API from every layer
        if dst == FACADE:
            upward.append(f"{src} imports the package facade")
        elif _layer(dst) > _layer(src):
            upward.append(f"{src} ({LAYERS[_layer(src)][0]}) imports {dst} ({LAYERS[_layer(dst)][0]})")
    assert not upward, "\n".join(upward)


def test_nothing_at_run_time_imports_the_offline_scripts(graph):
    offenders = [f"{src} -> {dst}" for src, dst in graph.edges
                 if dst.startswith(f"{FACADE}.{OFFLINE}") and not src.startswith(f"{FACADE}.{OFFLINE}")]
    assert not offenders, "\n".join(offenders)


def test_no_import_cycles(graph):
    cycles = list(nx.simple_cycles(graph.subgraph(n for n in graph if n != FACADE)))
    assert not cycles, "\n".join(" -> ".join(c + [c[0]]) for c in cycles)


def test_the_check_sees_imports_inside_functions(tmp_path):
    """A lazy upward import is caught too (the check is not vacuous)."""
    path = tmp_path / "mod.py"
    path.write_text("def f():\n    from placement_opt.solvers import run_solver\n")
    modules = _modules()
    found = _imports("placement_opt.workload.fake", str(path), modules)
    assert found == {"placement_opt.solvers"}
    assert _layer("placement_opt.solvers") > _layer("placement_opt.workload.fake")
