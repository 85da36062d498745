"""The layering rules of the code base (README "Code map"; style rule 9),
checked by parsing every module's imports, nested ones included:

- no import cycle between modules of `autotune/` and `cost_models/`;
- a package imports only itself and packages of a lower layer (LAYERS);
- `cost_models/` never imports `autotune`;
- click only in `autotune/cli/`; rich only in renderers (`render*.py`,
  `report.py`); pulp and highspy only in `autotune/pipeline/`;
- nothing outside `autotune/cli/` imports the CLI.

The checker is run on the real tree and on small deliberately broken
packages written by the tests, so that it is shown to catch what it claims.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("autotune", "cost_models")

# Packages from the top layer down; a package may import its own modules and
# those of any lower layer, never a package of its own layer or above. The
# README's code map lists the same layers. "plumbing" is the top-level shared
# modules: the package face, errors.py, io.py, loading.py, render_progress.py.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("autotune.cli",),
    ("autotune.compare", "autotune.job", "autotune.formats", "autotune.schemas"),
    ("autotune.plan",),
    ("autotune.pipeline", "autotune.calibrate", "autotune.verify"),
    ("autotune.hardware",),
    ("plumbing",),
    ("autotune.specs",),
    ("cost_models",),
)

# third-party library -> predicate on the importing module's dotted name
OWNERS = {
    "click": lambda mod: mod == "autotune.cli" or mod.startswith("autotune.cli."),
    "rich": lambda mod: (
        mod.rsplit(".", 1)[-1].startswith("render") or mod.rsplit(".", 1)[-1] == "report"
    ),
    "pulp": lambda mod: mod.startswith("autotune.pipeline."),
    "highspy": lambda mod: mod.startswith("autotune.pipeline."),
}


@dataclass(frozen=True)
class Violation:
    """One broken rule: which module, what it imports, which rule."""

    module: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.module} imports {self.imported}: {self.rule}"


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module `module` imports (top-level or nested), resolved to a
    known module where the name is one (`from pkg import sub` -> `pkg.sub`),
    otherwise the top-level name of the external library."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    resolved: set[str] = set()
    for name in names:
        if name in known:
            resolved.add(name)
        elif name.split(".")[0] not in PACKAGES and "." not in name:
            resolved.add(name)
        elif name.split(".")[0] not in PACKAGES:
            resolved.add(name.split(".")[0])
    resolved.discard(module)
    return resolved


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> modules it imports (internal ones and external top-level names)."""
    files = module_files(root, packages)
    known = set(files)
    return {mod: imports_of(mod, path, known) for mod, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in graph:
                continue
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def package_of(module: str) -> str | None:
    """The LAYERS entry a module belongs to (None for external libraries)."""
    parts = module.split(".")
    if parts[0] == "cost_models":
        return "cost_models"
    if parts[0] != "autotune":
        return None
    if len(parts) == 1 or f"autotune.{parts[1]}" not in _RANK:
        return "plumbing"
    return f"autotune.{parts[1]}"


_RANK = {pkg: len(LAYERS) - i for i, layer in enumerate(LAYERS) for pkg in layer}


def violations(graph: dict[str, set[str]]) -> list[Violation]:
    """Every broken layering rule of an import graph."""
    out: list[Violation] = []
    for mod, imported in sorted(graph.items()):
        for name in sorted(imported):
            top = name.split(".")[0]
            src, dst = package_of(mod), package_of(name)
            if dst is not None and src != dst and _RANK[dst] >= _RANK[src]:
                out.append(Violation(mod, name, f"{src} may not import {dst} (LAYERS)"))
            if mod.startswith("cost_models") and top == "autotune":
                out.append(Violation(mod, name, "cost_models must not import autotune"))
            if top in OWNERS and not OWNERS[top](mod):
                out.append(Violation(mod, name, f"only its owner modules may import {top}"))
            if (name == "autotune.cli" or name.startswith("autotune.cli.")) and not (
                mod == "autotune.cli" or mod.startswith("autotune.cli.")
            ):
                out.append(Violation(mod, name, "only autotune.cli imports the CLI"))
    for component in cycles(graph):
        out.append(Violation(component[0], " -> ".join(component), "import cycle"))
    return out


def test_the_code_base_keeps_its_layering():
    graph = import_graph(REPO, PACKAGES)
    assert "autotune.plan.search" in graph and "cost_models.baselines.wang" in graph
    found = violations(graph)
    assert not found, "\n".join(map(str, found))


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_is_caught(tmp_path):
    _write(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "autotune/a.py": "from autotune import b\n",
            "autotune/b.py": "def f():\n    from autotune.c import g\n",
            "autotune/c.py": "from .a import x\n",
            "autotune/d.py": "import autotune.a\n",
            "cost_models/__init__.py": "",
        },
    )
    found = violations(import_graph(tmp_path, PACKAGES))
    assert [v.rule for v in found] == ["import cycle"]
    assert found[0].imported == "autotune.a -> autotune.b -> autotune.c"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"cost_models/f.py": "from autotune.x import y\n", "autotune/x.py": ""},
            "cost_models.f imports autotune.x: cost_models must not import autotune",
        ),
        (
            {
                "autotune/plan/a.py": "from autotune.compare.b import c\n",
                "autotune/compare/b.py": "",
            },
            "autotune.plan.a imports autotune.compare.b: "
            "autotune.plan may not import autotune.compare (LAYERS)",
        ),
        (
            {"autotune/plan/search.py": "import click\n"},
            "autotune.plan.search imports click: only its owner modules may import click",
        ),
        (
            {"autotune/plan/results.py": "from rich.table import Table\n"},
            "autotune.plan.results imports rich: only its owner modules may import rich",
        ),
        (
            {"autotune/job/step.py": "def f():\n    import highspy\n"},
            "autotune.job.step imports highspy: only its owner modules may import highspy",
        ),
        (
            {
                "autotune/plan/x.py": "from autotune.cli import main\n",
                "autotune/cli/__init__.py": "",
            },
            "autotune.plan.x imports autotune.cli: only autotune.cli imports the CLI",
        ),
    ],
)
def test_each_rule_is_caught(tmp_path, files, expected):
    _write(tmp_path, {"autotune/__init__.py": "", "cost_models/__init__.py": "", **files})
    found = [str(v) for v in violations(import_graph(tmp_path, PACKAGES))]
    # An import that breaks a named rule may also break LAYERS; nothing else is reported.
    assert expected in found
    assert all(f.startswith(expected.split(" imports ")[0]) for f in found)
    assert len(found) <= 2


def test_owners_may_import_their_library(tmp_path):
    _write(
        tmp_path,
        {
            "autotune/__init__.py": "",
            "cost_models/__init__.py": "",
            "autotune/cli/plan.py": "import click\nfrom autotune.plan.report import r\n",
            "autotune/plan/report.py": "import rich\n",
            "autotune/pipeline/ilp.py": "import pulp\nimport highspy\n",
        },
    )
    assert violations(import_graph(tmp_path, PACKAGES)) == []
