"""The layers of ``pipeline/`` import downwards only (see pipeline/__init__.py).

Every import statement of every module is read with :mod:`ast`, including the ones
inside functions (the lazy imports of spawn targets count as much as the top-level ones).

A layer may group a family of its modules in a sub-package (``pipeline/run/evaluator/``).
The sub-package belongs to its layer: its modules follow the layer's rules, and it is
documented in its layer's docstring. Within the layer it is one unit: no module outside
it both imports it and is imported by it, directly or through others.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import its own package and any package of a lower rank;
# packages of the same rank do not import each other.
LAYER_RANK = {
    "common": 0,
    "transport": 1,
    "learning": 2,
    "run": 3,
    "cluster": 4,
    "commands": 4,
    "bench": 5,
}
# What the lower layers must stay free of, whatever the pipeline layer rules say.
FORBIDDEN_IN = {
    "common": {"torch", "config", "configuration", "envs", "models"},
    "transport": {"torch", "config", "configuration", "envs", "models"},
}
# The sub-packages of each layer (one level deep), each a family of the layer's modules.
SUB_PACKAGES = {"run": {"collector", "evaluator", "machine", "monitor", "trainer"}}
# Packages outside pipeline/: the environments and the network never import the pipeline.
OUTSIDE = {
    "envs": {"pipeline", "config", "configuration"},
    "models": {"pipeline", "config", "configuration", "envs"},
}
# What each module of configuration/ may import of the project: validation and the removed
# options sit under config.py (it imports them), resolution over it; none reaches above
# the transport layer (the transition's size).
CONFIGURATION_USES = {
    "validation": {"envs"},
    "removed": {"configuration"},
    "resolution": {"config", "configuration", "pipeline.transport"},
}


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in a file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                package = path.relative_to(root).with_suffix("").parts[: -node.level]
                base = ".".join(package)
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            # `from pipeline import run` and `from pipeline.cluster import reaper` name a
            # (sub-)package or a module, not an attribute: the import is of that module.
            names = [f"{module}.{alias.name}" for alias in node.names]
            modules = [name for name in names if module == "pipeline" or is_module(name, root)]
            found += [(node.lineno, name) for name in modules]
            if len(modules) < len(names):
                found.append((node.lineno, module))
    return found


def is_module(name: str, root: Path) -> bool:
    """Whether a dotted name is a module or a package of the tree at ``root``."""
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def layer_of(module: str) -> str | None:
    """The layer a module belongs to: a sub-package's modules belong to its layer."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "pipeline" else None


def violations(package_dir: Path, root: Path = ROOT) -> list[str]:
    problems = []
    for path in sorted(package_dir.rglob("*.py")):
        rel = path.relative_to(root)
        own = rel.parts[1] if rel.parts[0] == "pipeline" and len(rel.parts) > 2 else None
        for line, module in imported_modules(path, root):
            where = f"{rel}:{line} imports {module}"
            top = module.split(".")[0]
            if rel.parts[0] in OUTSIDE:
                if top in OUTSIDE[rel.parts[0]]:
                    problems.append(f"{where} ({rel.parts[0]}/ must not depend on {top})")
                continue
            if own is None:  # pipeline/__init__.py
                continue
            if top in FORBIDDEN_IN.get(own, ()):
                problems.append(f"{where} (the {own} layer must not use {top})")
            target = layer_of(module)
            if target is None or target == own:
                continue
            if target not in LAYER_RANK:
                problems.append(f"{where} (unknown layer {target!r}: add it to LAYER_RANK)")
            elif LAYER_RANK[target] >= LAYER_RANK[own]:
                problems.append(f"{where} ({own} may not import {target})")
    return problems


@pytest.mark.parametrize("package", ["pipeline", "envs", "models"])
def test_imports_point_down_only(package):
    assert violations(ROOT / package) == []


def test_configuration_modules_import_only_what_they_may():
    project = {"pipeline", "envs", "models", "config", "configuration", "main"}
    for name, allowed in CONFIGURATION_USES.items():
        path = ROOT / "configuration" / f"{name}.py"
        for line, module in imported_modules(path, ROOT):
            if module.split(".")[0] in project:
                assert any(module == a or module.startswith(f"{a}.") for a in allowed), (
                    f"{path.name}:{line} imports {module}"
                )
    assert {p.stem for p in (ROOT / "configuration").glob("*.py")} == set(CONFIGURATION_USES) | {"__init__"}


def test_every_layer_is_known_and_documented():
    packages = {p.name for p in (ROOT / "pipeline").iterdir() if (p / "__init__.py").is_file()}
    assert packages == set(LAYER_RANK)
    for name in packages:
        docstring = ast.get_docstring(ast.parse((ROOT / "pipeline" / name / "__init__.py").read_text()))
        assert docstring and len(docstring.splitlines()) >= 3, f"pipeline/{name}/__init__.py needs a docstring"


def sub_packages(root: Path = ROOT) -> dict[str, set[str]]:
    """The sub-packages found under each layer's folder, by layer."""
    found: dict[str, set[str]] = {}
    for init in sorted((root / "pipeline").glob("*/*/__init__.py")):
        found.setdefault(init.parent.parent.name, set()).add(init.parent.name)
    return found


def test_every_sub_package_is_known_one_level_deep_and_documented():
    assert sub_packages() == SUB_PACKAGES
    assert list((ROOT / "pipeline").glob("*/*/*/__init__.py")) == []
    for layer, names in SUB_PACKAGES.items():
        layer_doc = ast.get_docstring(ast.parse((ROOT / "pipeline" / layer / "__init__.py").read_text())) or ""
        for name in names:
            docstring = ast.get_docstring(ast.parse((ROOT / "pipeline" / layer / name / "__init__.py").read_text()))
            assert docstring and len(docstring.splitlines()) >= 3, (
                f"pipeline/{layer}/{name}/__init__.py needs a docstring"
            )
            assert f"pipeline.{layer}.{name}`" in layer_doc, f"pipeline/{layer}/__init__.py should describe {name}"
            assert layer_of(f"pipeline.{layer}.{name}.anything") == layer


def test_the_checker_catches_a_wrong_way_import(tmp_path):
    """The rules above fail on an upward import (so the passing test means something)."""
    layer = tmp_path / "pipeline" / "transport"
    layer.mkdir(parents=True)
    (layer / "__init__.py").write_text('"""x"""\n')
    (layer / "bad.py").write_text("def f():\n    from pipeline.run.trainer.trainer import Trainer\n    import torch\n")
    (layer / "sibling.py").write_text("from . import bad\nfrom ..learning import replay\n")
    found = violations(tmp_path / "pipeline", root=tmp_path)
    assert any("transport may not import run" in p for p in found)
    assert any("must not use torch" in p for p in found)
    assert any("imports pipeline.learning" in p and "transport may not import learning" in p for p in found)
    assert not any("imports pipeline.transport.bad" in p for p in found)


def test_a_sub_package_follows_its_layers_rules(tmp_path):
    """A sub-package's modules may import their layer and the layers below it, not above."""
    family = tmp_path / "pipeline" / "learning" / "family"
    family.mkdir(parents=True)
    (family.parent / "__init__.py").write_text('"""x"""\n')
    (family / "__init__.py").write_text('"""x"""\n')
    (family.parent / "loose.py").write_text("from pipeline.learning.family.member import f\n")
    (family / "member.py").write_text(
        "from pipeline.learning import loose\nfrom pipeline.transport import ring\nfrom ..loose import g\n"
    )
    (family / "upward.py").write_text(
        "def f():\n    from pipeline.run.trainer.trainer import Trainer\n    import config\n"
    )
    found = violations(tmp_path / "pipeline", root=tmp_path)
    assert found == [
        "pipeline/learning/family/upward.py:2 imports pipeline.run.trainer.trainer (learning may not import run)"
    ]


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the project by its dotted name (packages by their ``__init__``)."""
    found = {}
    for path in sorted(root.glob("*.py")) + sorted(
        p for package in ("pipeline", "envs", "models") for p in (root / package).rglob("*.py")
    ):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def import_graph(root: Path = ROOT, *, families: bool = False) -> dict[str, set[str]]:
    """Who imports whom, type-checking and function-level imports included.

    ``families``: each sub-package of a layer is one node (its modules and ``__init__``
    together); every other module is a node of its own."""
    modules = project_modules(root)
    prefixes = [f"pipeline.{layer}.{name}" for layer, names in sub_packages(root).items() for name in names]

    def node(module: str) -> str:
        return next((p for p in prefixes if module == p or module.startswith(p + ".")), module) if families else module

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets = graph.setdefault(node(name), set())
        for _, module in imported_modules(path, root):
            while module and module not in modules:  # `from pkg.mod import name` -> pkg.mod
                module = module.rpartition(".")[0]
            if module and node(module) != node(name) and not name.startswith(module + "."):
                targets.add(node(module))  # a module importing its own package is not a cycle
    return graph


def import_cycles(root: Path = ROOT, *, families: bool = False) -> list[list[str]]:
    """Cycles of :func:`import_graph` (of modules, or with each sub-package as one node)."""
    graph = import_graph(root, families=families)
    cycles, state = [], dict.fromkeys(graph, 0)  # 0 new, 1 on the path, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph[node]):
            if state[target] == 1:
                cycles.append([*path[path.index(target) :], target])
            elif state[target] == 0:
                visit(target, [*path, target])
        state[node] = 2

    for node in sorted(graph):
        if state[node] == 0:
            visit(node, [node])
    return cycles


def test_no_module_imports_one_that_imports_it_back():
    assert import_cycles() == []


def test_each_sub_package_is_one_unit_of_its_layer():
    """No module outside a sub-package both uses it and is used by it (nor another sub-package)."""
    graph = import_graph(families=True)
    assert {"pipeline.run.evaluator", "pipeline.run.monitor"} <= set(graph)
    assert "pipeline.run.monitor" in graph["pipeline.run.evaluator"]  # a real edge between two of them
    assert import_cycles(families=True) == []


def test_the_family_checker_finds_a_cycle_through_a_sub_package(tmp_path):
    """Two modules of a sub-package and one beside it: no module cycle, but a family one."""
    family = tmp_path / "pipeline" / "run" / "family"
    family.mkdir(parents=True)
    for init in (tmp_path / "pipeline", family.parent, family):
        (init / "__init__.py").write_text("")
    (family / "first.py").write_text("from pipeline.run import beside\n")
    (family / "second.py").write_text("x = 1\n")
    (family.parent / "beside.py").write_text("def f():\n    from pipeline.run.family.second import x\n")
    assert import_cycles(tmp_path) == []
    assert import_cycles(tmp_path, families=True) == [
        ["pipeline.run.beside", "pipeline.run.family", "pipeline.run.beside"]
    ]


def test_the_cycle_checker_finds_a_type_checking_cycle(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from a import x\n")
    assert import_cycles(tmp_path) == [["a", "b", "a"]]
