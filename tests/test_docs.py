"""The README is a front door (a few screens, its links resolve) and every docs page it leads to
exists: links are checked the way a Markdown viewer resolves them, relative to the page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the README's size: what it is, the install, the Quickstart, the tests, the commands, one example
#: per use and the links; the details live in docs/
MAX_LINES, MAX_BYTES = 150, 12 * 1024
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md"]


def test_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text("utf-8")
    assert len(text.splitlines()) <= MAX_LINES and len(text.encode()) <= MAX_BYTES
    for heading in ("## Quickstart", "## Commands", "## Documentation"):
        assert heading in text
    # the two Quickstart commands, and the test command .ci/run runs
    assert "python3 cli.py audit --model smollm2-135m --corpus corpora/medical" in text
    test_cmd = "bash scripts/install.sh --dev && python3 -m pytest -q"
    assert test_cmd in text and test_cmd in (ROOT / ".ci" / "run").read_text("utf-8")


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page: Path):
    broken = []
    for target in LINK.findall(page.read_text("utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (page.parent / path).exists():
            broken.append(target)
    assert broken == [], f"{page.name}: links to nothing: {broken}"


def test_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text("utf-8")
    listed = set(LINK.findall(index))
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md" and p.name not in listed]
    assert missing == [], f"docs/README.md does not list {missing}"


def test_every_api_parameter_is_documented_in_the_source():
    """Each public function of ``embscope.api`` names every parameter in its own docstring, as written
    in the source (nothing is appended at import, so an editor and a reader see the whole list)."""
    import ast

    src = (ROOT / "embscope" / "api.py").read_text("utf-8")
    missing = {}
    for node in ast.parse(src).body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or node.name == "api_function":
            continue
        doc = ast.get_docstring(node) or ""
        args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
        names = [a.arg for a in node.args.args + node.args.kwonlyargs]
        lost = [n for n in names if not re.search(rf"^\s+{n}:", args, re.M)]
        if lost:
            missing[node.name] = lost
    assert missing == {}, f"parameters without a line in their function's Args: {missing}"
