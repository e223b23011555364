"""The layers of the tree, enforced on its imports (issue 15, DESIGN.md's layout table).

    programs ──▶ gateway ──▶ broker ──▶ app
                 workers ──▶ broker ──▶ app

- ``app/`` is the engine alone: no framework, none of our other packages;
- the broker package (the Celery wiring gateway and workers share) imports app, celery, kombu;
- ``workers/`` imports app, the broker and celery, never the gateway or the programs;
- ``gateway/`` imports, of our packages, app and the broker only;
- no two of our modules import each other, however indirectly;
- inside ``app/``, the layers under the loop (tools, protocol, providers, store) never import it,
  and the model providers never import the tool kinds.

Every import counts: module-level, nested in a function, relative, under ``if TYPE_CHECKING``.
A package that does not exist yet (the broker) has no imports, so it breaks no rule.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

OURS = ("app", "broker", "gateway", "workers", "programs")
WEB = frozenset({"flask", "gunicorn", "werkzeug", "simple_websocket"})
FRAMEWORKS = WEB | {"celery", "kombu", "gevent"}
# The loop: what drives a response, turn by turn. The layers under it serve it.
LOOP = frozenset(
    {
        "app.run",
        "app.plan",
        "app.output",
        "app.sink",
        "app.responses",
        "app.socket_session",
        "app.compaction",
        "app.fleet",
        "app.relay",
    }
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """Modules under ``importers`` may import no module under ``forbidden``."""

    name: str
    importers: frozenset[str]
    """Module names; each stands for itself and everything below it."""
    forbidden: frozenset[str]
    """Module names (ours resolved to the module imported, others as written); same reading."""


RULES = (
    Rule(
        name="app imports no framework and none of our other packages",
        importers=frozenset({"app"}),
        forbidden=FRAMEWORKS | {"broker", "gateway", "workers", "programs"},
    ),
    Rule(
        name="the broker imports only app, celery and kombu",
        importers=frozenset({"broker"}),
        forbidden=WEB | {"gevent", "gateway", "workers", "programs"},
    ),
    Rule(
        name="workers import app, the broker and celery, never gateway or programs",
        importers=frozenset({"workers"}),
        forbidden=WEB | {"gateway", "programs"},
    ),
    Rule(
        name="gateway imports, of ours, only app and the broker",
        importers=frozenset({"gateway"}),
        forbidden=frozenset({"workers", "programs"}),
    ),
    Rule(
        name="the model providers never import the tool kinds above them",
        importers=frozenset({"app.providers"}),
        forbidden=frozenset({"app.tools"}),
    ),
    Rule(
        name="the layers under the loop never import the loop",
        importers=frozenset({"app.tools", "app.protocol", "app.providers", "app.store"}),
        forbidden=LOOP,
    ),
)

# issue 15: today's violations, each named with the section of the issue whose branch (written
# alongside this test) removes it; the integrator takes each entry off as that branch is merged.
# The tests below fail for any violation not listed here, and for any entry that no longer happens.
KNOWN_VIOLATIONS: frozenset[tuple[str, str]] = frozenset()
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _module_files(root: Path) -> Iterator[tuple[str, Path]]:
    for package in OURS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Every name ``module`` imports, absolute, with ``from X import y`` given as ``X.y``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package=is_package, level=node.level, name=node.module)
            # `from X import y` imports the module X.y if there is one, else X (for its name y)
            yield from (
                base if alias.name == "*" else f"{base}.{alias.name}" for alias in node.names
            )


def _absolute(module: str, *, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    anchor = parts if is_package else parts[:-1]
    anchor = anchor[: len(anchor) - (level - 1)]
    return ".".join([*anchor, name] if name else anchor)


def _resolve(name: str, modules: Mapping[str, Path]) -> str:
    """The module of ours ``name`` lives in (``app.tools.X`` → ``app.tools``), else ``name``."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return name


def import_graph(root: Path) -> dict[str, frozenset[str]]:
    """Each of our modules under ``root`` and the modules it imports."""
    modules = dict(_module_files(root))
    graph: dict[str, frozenset[str]] = {}
    for module, path in modules.items():
        graph[module] = frozenset(_resolve(name, modules) for name in _imported_names(module, path))
    return graph


def violations(graph: Mapping[str, frozenset[str]], rules: Iterable[Rule]) -> set[tuple[str, str]]:
    """``(importer, imported)`` for every import a rule forbids."""
    return {
        (importer, imported)
        for rule in rules
        for importer, imports in graph.items()
        if _within(importer, rule.importers)
        for imported in imports
        if _within(imported, rule.forbidden)
    }


def cycles(graph: Mapping[str, frozenset[str]]) -> set[frozenset[str]]:
    """The strongly connected components of our modules with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in graph:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.add(frozenset(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, frozenset[str]]:
    return import_graph(Path(__file__).resolve().parent.parent)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_layers_rule_holds_but_for_the_known_violations(
    rule: Rule, graph: dict[str, frozenset[str]]
) -> None:
    assert violations(graph, [rule]) - KNOWN_VIOLATIONS == set()


def test_layers_known_violations_all_still_happen(graph: dict[str, frozenset[str]]) -> None:
    """An entry whose import is gone comes off the list, so the list only ever shrinks."""
    assert KNOWN_VIOLATIONS - violations(graph, RULES) == set()


def test_layers_have_no_import_cycle_but_the_known_ones(graph: dict[str, frozenset[str]]) -> None:
    assert cycles(graph) - KNOWN_CYCLES == set()


def test_layers_known_cycles_all_still_happen(graph: dict[str, frozenset[str]]) -> None:
    assert KNOWN_CYCLES - cycles(graph) == set()


def test_layers_see_the_engine_and_the_programs(graph: dict[str, frozenset[str]]) -> None:
    """The rules read the real tree: a wrong root would make every rule hold vacuously."""
    assert {
        "app.run",
        "app.tools.registry",
        "gateway.factory",
        "workers.tasks",
        "broker.dispatch",
    } <= graph.keys()
    assert {"programs.cli", "programs.chat", "programs.simulator.server"} <= graph.keys()
    assert not {"app.cli", "app.supervisor", "app.chat", "app.simulator"} & graph.keys()


# -- the checks themselves, on planted trees ---------------------------------------------------


def _plant(root: Path, module: str, source: str = "") -> None:
    path = root.joinpath(*module.split("."), "__init__.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_layers_rule_catches_a_planted_violation(rule: Rule, tmp_path: Path) -> None:
    for target in rule.forbidden:
        if target.split(".")[0] in OURS:
            _plant(tmp_path, target)
    body = "".join(f"    import {target}\n" for target in sorted(rule.forbidden))
    for importer in rule.importers:
        _plant(tmp_path, f"{importer}.planted", f"def load():\n{body}")
    expected = {
        (f"{importer}.planted", target) for importer in rule.importers for target in rule.forbidden
    }
    assert violations(import_graph(tmp_path), [rule]) == expected


def test_layers_rules_allow_what_the_layers_permit(tmp_path: Path) -> None:
    for module in ("app.run", "app.protocol", "app.store", "app.tools", "broker", "workers"):
        _plant(tmp_path, module)
    _plant(tmp_path, "app.tools.mcp", "from app import protocol, store\nimport pydantic\n")
    _plant(tmp_path, "app.providers.chat", "import httpx\nfrom app.protocol import Item\n")
    _plant(tmp_path, "broker.queues", "import celery\nimport kombu\nfrom app import run\n")
    _plant(tmp_path, "workers.tasks", "from celery import shared_task\nimport broker, app.run\n")
    _plant(tmp_path, "gateway.views", "import flask\nfrom broker import queues\nimport app\n")
    _plant(tmp_path, "programs.cli", "import gateway.views, workers.tasks, broker, app, flask\n")
    assert violations(import_graph(tmp_path), RULES) == set()


def test_import_graph_reads_every_form_of_import(tmp_path: Path) -> None:
    _plant(tmp_path, "app.a")
    _plant(tmp_path, "app.b", "NAME = 1\n")
    (tmp_path / "app" / "b" / "c.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import a\n"
        "from . import NAME\n"
        "import flask.json\n"
        "if TYPE_CHECKING:\n"
        "    from gateway.views import View\n"
        "def load():\n"
        "    from celery import Celery\n"
        "    from app.d import *\n"
    )
    assert import_graph(tmp_path)["app.b.c"] == {
        "typing.TYPE_CHECKING",
        "app.a",
        "app.b",
        "flask.json",
        "gateway.views.View",
        "celery.Celery",
        "app.d",
    }


def test_cycles_finds_each_circle_however_long(tmp_path: Path) -> None:
    _plant(tmp_path, "app.a", "import app.b\n")
    _plant(tmp_path, "app.b", "def load():\n    from app import c\n")
    _plant(tmp_path, "app.c", "from .. import a\n")
    _plant(tmp_path, "app.d", "from app.a import NAME\nimport app.e\n")
    _plant(tmp_path, "app.e")
    _plant(tmp_path, "gateway.f", "from gateway.g import View\n")
    _plant(tmp_path, "gateway.g", "from gateway import f\n")
    assert cycles(import_graph(tmp_path)) == {
        frozenset({"app.a", "app.b", "app.c"}),
        frozenset({"gateway.f", "gateway.g"}),
    }
