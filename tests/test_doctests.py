"""The package's docstring examples run, as ``pytest --doctest-modules embscope`` runs them: one
test per module that has examples (a module without any is not listed); so do the notebook-style
pages of ``docs/`` (:data:`PAGES`), their printed output checked."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "embscope"
#: pages of docs/ written as a session (``>>>`` lines and what they print)
PAGES = ("api.md",)

#: modules whose examples do not run yet (none: every module's examples run)
NOT_YET: set[str] = set()
#: how the examples are compared: ``...`` stands for any text, runs of white space are one
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _with_examples() -> list[str]:
    """Modules whose source holds a ``>>>`` line (read as text: nothing is imported to list them)."""
    names = [_module_name(p) for p in sorted(PKG.rglob("*.py")) if p.name != "__main__.py"
             and ">>>" in p.read_text(encoding="utf-8")]
    return [n for n in names if n not in NOT_YET]


@pytest.mark.parametrize("name", _with_examples())
def test_examples_run(name, monkeypatch):
    monkeypatch.chdir(ROOT)  # examples name the shipped corpora by their paths
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    tests = doctest.DocTestFinder().find(module, name)
    for t in sorted(tests, key=lambda t: t.name):
        runner.run(t, out=report.append)
    assert runner.failures == 0, "".join(report)


@pytest.mark.parametrize("page", PAGES)
def test_docs_pages_run(page, monkeypatch, tmp_path):
    """Every ``>>>`` line of the page runs and prints what the page says (the folders it makes go
    under the test's own temporary folder)."""
    import tempfile

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = ROOT / "docs" / page
    test = doctest.DocTestParser().get_doctest(path.read_text(encoding="utf-8"), {}, page, str(path), 0)
    assert len(test.examples) >= 10, page
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report: list[str] = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_the_left_out_modules_exist():
    """A module in :data:`NOT_YET` that is renamed or whose examples now live elsewhere leaves the list."""
    for name in NOT_YET:
        path = PKG.parent / Path(*name.split(".")).with_suffix(".py")
        assert path.is_file() and ">>>" in path.read_text(encoding="utf-8"), name
