"""app/ is the framework-free core: no module in it may import flask or celery."""

from __future__ import annotations

import ast
from pathlib import Path

FORBIDDEN = {"flask", "celery", "gateway", "workers"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_app_imports_no_framework(repo_root: Path) -> None:
    offenders = {
        str(path.relative_to(repo_root)): sorted(_imports(path) & FORBIDDEN)
        for path in (repo_root / "app").rglob("*.py")
        if _imports(path) & FORBIDDEN
    }
    assert offenders == {}


def test_layering_check_sees_nested_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from celery import Celery\n    import flask.json\n")
    assert _imports(module) == {"celery", "flask"}


def _offenders(repo_root: Path, package: str, forbidden: set[str]) -> dict[str, list[str]]:
    return {
        str(path.relative_to(repo_root)): sorted(_imports(path) & forbidden)
        for path in (repo_root / package).rglob("*.py")
        if _imports(path) & forbidden
    }


def test_gateway_never_imports_workers(repo_root: Path) -> None:
    assert _offenders(repo_root, "gateway", {"workers"}) == {}


def test_broker_imports_neither_side(repo_root: Path) -> None:
    assert _offenders(repo_root, "broker", {"flask", "gateway", "workers"}) == {}
