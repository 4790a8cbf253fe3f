"""The shape of the code: imports point one way, the schema doc is current, commands are thin,
the API lists every command."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "embscope"

#: import layers, lowest first: a module may import only from its own layer or lower ones
LAYERS = [
    ("errors", "allocator", "records", "registry", "assets", "progress", "provenance", "output", "config"),
    ("loaders",),
    ("resolve",),
    ("tokenizer",),
    ("model", "load"),
    ("tables", "schema", "context", "geometry", "languages", "extension"),
    ("sections",),
    ("summary", "report"),
    ("runner",),
    ("api",),
    ("commands", "cli", "__main__"),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in PKG.rglob("*.py"):
        name = ".".join(f.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = f
    return mods


def _edges() -> dict[str, set[str]]:
    """module → embscope modules it imports (anywhere in the file, function bodies included)."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embscope"):
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module
                           for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("embscope")]
            for t in targets:
                parts = t.split(".")
                for i in range(2, len(parts) + 1):  # importing a.b.c runs a.b's __init__ too
                    if ".".join(parts[:i]) in mods and ".".join(parts[:i]) != m:
                        edges[m].add(".".join(parts[:i]))
    return edges


def _layer(module: str) -> int:
    return RANK[module.split(".")[1]]


def test_every_module_has_a_layer():
    assert not [m for m in _modules() if m != "embscope" and m.split(".")[1] not in RANK]


def test_imports_point_one_way():
    bad = [f"{a} -> {b}" for a, bs in _edges().items() if a != "embscope" for b in bs
           if _layer(b) > _layer(a)]
    assert bad == [], "imports against the layer order (loaders <- resolve <- tokenizer <- load <- "\
                      "sections <- runner <- commands):\n" + "\n".join(bad)


def test_no_import_cycle():
    edges = _edges()
    state: dict[str, int] = {}
    cycles = []

    def visit(u, stack):
        state[u] = 1
        stack.append(u)
        for v in sorted(edges[u]):
            if state.get(v) == 1:
                cycles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif not state.get(v):
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for m in sorted(edges):
        if not state.get(m):
            visit(m, [])
    # a package importing its own submodules (tokenizer/__init__ -> tokenizer.load -> tokenizer.base)
    # is how Python packages work; a real cycle passes through another package
    real = [c for c in cycles if len({m.split(".")[1] for m in c.split(" -> ")}) > 1]
    assert real == [], "\n".join(real)


def test_commands_are_parse_call_print():
    """Command modules call the library API; they import no analysis module."""
    allowed = ("embscope.api", "embscope.commands", "embscope.errors", "embscope.records", "embscope.progress",
               "embscope.registry", "embscope.report", "embscope.geometry.scan", "embscope.cli", "embscope.output",
               "embscope.resolve",
               "embscope.context")
    for f in (PKG / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embscope"):
                assert node.module.startswith(allowed), f"{f.name} imports {node.module}"


def test_schema_doc_is_current():
    res = subprocess.run([sys.executable, "scripts/schema_doc.py", "--check"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_api_lists_every_command():
    import embscope

    for name in ("audit", "scan", "fertility", "compare", "extend", "rope", "run", "load_model",
                 "context_summary", "load_vocabulary"):
        assert name in dir(embscope) and callable(getattr(embscope, name)), name
        assert getattr(embscope, name).__doc__, name


def test_version_and_module_entry_point():
    import embscope

    res = subprocess.run([sys.executable, "-m", "embscope", "--version"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == f"embscope {embscope.__version__}"


@pytest.mark.parametrize("argv", [["--device", "gpu"], ["--device", "cuda0"]])
def test_device_is_a_choice(argv, capsys):
    from embscope.cli import main

    assert main(["scan", "--model", "minilm-l6", *argv]) == 2
    assert "Invalid value for '--device'" in capsys.readouterr().err


def test_shipped_corpora_by_name_from_any_directory(tmp_path, monkeypatch):
    from embscope.runner import corpus_path

    monkeypatch.chdir(tmp_path)
    assert corpus_path("medical") == (ROOT / "corpora" / "medical")
    assert corpus_path("udhr").is_dir()


@pytest.mark.slow
def test_every_written_column_is_documented(smollm2_audit):
    import polars as pl

    from embscope.schema import TABLES, dtype_of

    for table in ("tokens", "languages", "candidates"):
        documented = {c for c, *_ in TABLES[table]}
        schema = pl.read_parquet_schema(smollm2_audit / f"{table}.parquet")
        assert set(schema) <= documented, set(schema) - documented
        types = {c: dtype_of(t) for c, t, *_ in TABLES[table]}
        wrong = {c: str(schema[c]) for c in schema if schema[c] != types[c] and schema[c] != pl.Null}
        assert wrong == {}, wrong


def test_freed_blocks_are_reused():
    """After ``reuse_freed_blocks`` a freed 64 MiB buffer is handed out again from the heap, so
    allocating it again costs no new page faults; ``release_free_blocks`` gives the pages back.
    In a child process: the settings are process-wide."""
    code = """
import resource, torch
from embscope.allocator import release_free_blocks, reuse_freed_blocks
m = torch.ones(8, 2048, 1024, dtype=torch.bfloat16)
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(8):
        m[i].float().sum()  # a fresh 8 MiB float32 buffer each time
        torch.empty(16 << 20).fill_(1.0).sum()  # and a 64 MiB one
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
plain = faults()
if not reuse_freed_blocks():
    print("skip")
else:
    faults()
    reused = faults()
    release_free_blocks()
    print(plain, reused, faults())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT).stdout.split()
    if out == ["skip"]:
        pytest.skip("not glibc")
    plain, reused, released = map(int, out)
    assert plain > 20000 and reused < 2000 and released > 2000  # an mmap per buffer: ~ 8 × 18432 pages
