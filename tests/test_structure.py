"""The shape of the code: imports point one way, the schema doc is current, commands are thin,
the API lists every command."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.import_graph import edges, imports, modules, package

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "embscope"

#: import layers, lowest first: a module may import only from its own layer or lower ones, and
#: within a layer only from its own package (so the analyses never import each other)
LAYERS = [
    ("errors", "signals", "records", "assets", "progress", "provenance", "output", "config", "limits", "machine",
     "compiled", "arguments", "children"),
    ("formats",),
    ("text",),
    ("corpus",),
    ("tokenizer",),
    ("models",),
    ("tables", "schema", "context", "geometry", "languages", "extension", "readiness"),
    ("changes",),  # after the fine-tune: builds on the check's findings and its tokenization
    ("sections",),
    ("verdict",),  # the bottom line, built from the section records
    ("summary",),
    ("report",),
    ("runner",),
    ("api",),
    ("integrations",),  # inside other tools' loops: the trainer callback composes the library's calls
    ("commands",),
    ("cli",),
    ("__main__",),
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
#: the bottom layer's modules are small utilities that build on each other (output writes records)
UTILITIES = set(LAYERS[0])


def _layer(module: str) -> int:
    return RANK[package(module)]


def test_every_module_has_a_layer():
    assert not [m for m in modules() if m != "embscope" and package(m) not in RANK]


def test_imports_point_one_way():
    bad = [f"{a} -> {b}" for a, bs in edges().items() if a != "embscope" for b in bs
           if _layer(b) > _layer(a)
           or (_layer(b) == _layer(a) and package(a) != package(b) and package(a) not in UTILITIES)]
    assert bad == [], "imports against the layer order (formats <- text <- corpus <- tokenizer <- "\
                      "models <- analyses <- sections <- runner <- api <- commands), or between two "\
                      "packages of one layer:\n" + "\n".join(bad)


def test_no_import_cycle():
    """No cycle at all, inside a package or across packages (a module's own enclosing packages
    do not count: Python runs them before the module)."""
    graph = edges()
    state: dict[str, int] = {}
    cycles = []

    def visit(u, stack):
        state[u] = 1
        stack.append(u)
        for v in sorted(graph[u]):
            if state.get(v) == 1:
                cycles.append(" -> ".join(stack[stack.index(v):] + [v]))
            elif not state.get(v):
                visit(v, stack)
        stack.pop()
        state[u] = 2

    for m in sorted(graph):
        if not state.get(m):
            visit(m, [])
    assert cycles == [], "\n".join(cycles)


def test_no_private_name_crosses_a_package():
    """``from embscope.a.x import _helper`` only inside package ``a``: a helper another package needs
    is public, in the lowest package that both can import."""
    bad = [f"{m} imports {name} from {t}" for m, targets in imports().items() for t, names in targets
           for name in names if name.startswith("_") and not name.endswith("__") and package(t) != package(m)]
    assert bad == [], "\n".join(bad)


def test_commands_are_parse_call_print():
    """Command modules call the library API and read its records; they import no analysis module."""
    allowed = ("embscope.api", "embscope.commands", "embscope.errors", "embscope.records", "embscope.progress",
               "embscope.models.registry", "embscope.report", "embscope.cli", "embscope.output",
               # the records the commands print
               "embscope.context.summary", "embscope.geometry.records", "embscope.readiness.record",
               # how numbers are written for people (no analysis)
               "embscope.text.numbers")
    for f in (PKG / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embscope"):
                assert node.module.startswith(allowed), f"{f.name} imports {node.module}"


def test_terminal_output_only_in_commands():
    """Only the command modules print results: no library module imports rich or typer (progress.py
    draws the bars of a run at work on stderr, not its results)."""
    bad = []
    for f in PKG.rglob("*.py"):
        if f.parent.name == "commands" or f.name in ("cli.py", "progress.py"):
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad += [f"{f.relative_to(PKG)} imports {n}" for n in names if n.split(".")[0] in ("rich", "typer")]
    # the scan's printer moves to commands/scan.py with the geometry rewrite (scan_tables reads the record)
    assert bad == ["geometry/scan.py imports rich.console", "geometry/scan.py imports rich.markup",
                   "geometry/scan.py imports rich.table"] or bad == [], "\n".join(sorted(bad))


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


def _section_io(path: Path) -> tuple[set[str], set[str]]:
    """The :class:`SectionInputs` fields a section module reads (``inputs.<field>``) and the ones it gives
    (``gives["<field>"]``, ``gives={"<field>": ...}``), read from its source."""
    reads, gives = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "inputs":
            reads.add(node.attr)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and (
                isinstance(node.value, ast.Attribute) and node.value.attr == "gives"
                or isinstance(node.value, ast.Name) and node.value.id == "gives"):
            gives.add(node.slice.value)
        elif isinstance(node, (ast.Assign, ast.keyword)):
            named = node.arg == "gives" if isinstance(node, ast.keyword) else any(
                isinstance(t, ast.Name) and t.id == "gives" for t in node.targets)
            if named:
                gives |= {k.value for d in ast.walk(node.value) if isinstance(d, ast.Dict)
                          for k in d.keys if isinstance(k, ast.Constant)}
    return reads, gives


def test_sections_read_and_give_what_they_declare():
    """Each section's source reads exactly the inputs its registration declares (besides
    ``options`` and ``steps``, which every section has) and gives only those it declares."""
    from embscope.sections.registry import SECTIONS

    for s in SECTIONS:
        reads, gives = _section_io(Path(sys.modules[s.run.__module__].__file__))
        assert reads - {"options", "steps"} == set(s.reads) | set(s.requires), (s.name, reads)
        assert gives == set(s.gives), (s.name, gives)


def test_sections_register_where_they_are_defined():
    """Every section module registers one section, and every registered section is in the run."""
    from embscope.sections.base import REGISTERED
    from embscope.sections.registry import MODULES, SECTIONS

    assert sorted(REGISTERED) == sorted(s.name for s in SECTIONS)
    assert [s.run.__module__ for s in SECTIONS] == [m.__name__ for m in MODULES]
    defined = {f"embscope.sections.{p.stem}" for p in (PKG / "sections").glob("*.py")} - {
        "embscope.sections.base", "embscope.sections.options", "embscope.sections.registry"}
    assert defined == {m.__name__ for m in MODULES}


def test_help_imports_neither_numpy_nor_torch():
    """``embscope --help`` (and every command's ``--help``) answers without the heavy libraries."""
    code = ("import sys\nfrom embscope.cli import main\n"
            "codes = [main(argv) for argv in (['--help'], ['audit', '--help'], ['check', '--help'])]\n"
            "print(codes, sorted({m.split('.')[0] for m in sys.modules} & "
            "{'numpy', 'torch', 'polars', 'transformers', 'tokenizers', 'pyarrow'}))")
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[0, 0, 0] []", res.stdout[-500:]


def test_registry_and_summary_agree():
    """Every registered section has its field in ``Sections``, in run order, typed by its record;
    every declared hand-off names a field of ``SectionInputs``."""
    import dataclasses
    import typing

    from embscope.records import field_types
    from embscope.sections.base import SectionInputs
    from embscope.sections.registry import SECTIONS
    from embscope.summary import Sections

    assert [f.name for f in dataclasses.fields(Sections)] == [s.name for s in SECTIONS]
    types = field_types(Sections)
    for s in SECTIONS:
        assert s.record in typing.get_args(types[s.name]), s.name
        assert callable(s.function()), s.entry
    inputs = {f.name for f in dataclasses.fields(SectionInputs)}
    assert {n for s in SECTIONS for n in (*s.reads, *s.gives)} <= inputs


def _records(cls, seen: dict) -> dict:
    """Every Record class reachable from ``cls`` through its fields' annotations."""
    import typing

    from embscope.records import Record, field_types

    if cls in seen:
        return seen
    seen[cls] = field_types(cls)

    def walk(tp):
        if isinstance(tp, type) and issubclass(tp, Record):
            _records(tp, seen)
        for arg in typing.get_args(tp):
            walk(arg)

    for tp in seen[cls].values():
        walk(tp)
    return seen


def test_every_record_field_is_typed():
    """No field of summary.json's records is ``Any`` or holds ``Any`` (``dict[str, Any]``): each
    says what it holds, down to the last value, and from_dict checks it."""
    import typing

    from embscope.summary import Summary

    def untyped(tp) -> bool:
        return tp is typing.Any or any(untyped(a) for a in typing.get_args(tp))

    found = {f"{cls.__name__}.{name}" for cls, hints in _records(Summary, {}).items()
             for name, tp in hints.items() if untyped(tp)}
    assert found == set(), f"untyped: {sorted(found)}"


#: longest function and module (lines) without a ``# long:`` reason
MAX_FUNCTION_LINES, MAX_MODULE_LINES = 80, 500


def test_no_long_function_or_module_without_a_reason():
    """One idea per function and per module: a function past MAX_FUNCTION_LINES lines or a module
    past MAX_MODULE_LINES carries a comment line ``# long: <why>`` (inside the function; at the
    module's top level), or is split."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        lines = f.read_text(encoding="utf-8").splitlines()
        if len(lines) > MAX_MODULE_LINES and not any(line.startswith("# long:") for line in lines):
            bad.append(f"{f.relative_to(ROOT)}: {len(lines)} lines")
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = lines[node.lineno - 1:node.end_lineno]
                if len(body) > MAX_FUNCTION_LINES and not any(b.strip().startswith("# long:") for b in body):
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}: {len(body)} lines")
    assert bad == [], "split these, or give the reason in a '# long:' comment:\n" + "\n".join(bad)


def test_public_class_names_are_unique():
    """One class per name across the package: a reader (and a caller's import) never meets two
    ``Facts`` or two ``SpecialsRecord``; a name kept for older callers is an alias, not a class."""
    seen: dict[str, list[str]] = {}
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                seen.setdefault(node.name, []).append(str(f.relative_to(PKG)))
    assert {n: fs for n, fs in seen.items() if len(fs) > 1} == {}


#: most parameters of a function outside the public API (self/cls, *args and **kwargs not counted),
#: and most fields of an options or inputs record: past them, pass a group or a small record
MAX_PARAMETERS, MAX_GROUP_FIELDS = 10, 16


def test_no_function_takes_more_than_ten_parameters():
    """Outside :mod:`embscope.api` (whose functions are the command line's options, each documented),
    a function takes its stage's option group or a small record, not a list of knobs."""
    bad = []
    for f in sorted(PKG.rglob("*.py")):
        if f == PKG / "api.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                n = len(names) - (names[:1] in (["self"], ["cls"]))
                if n > MAX_PARAMETERS:
                    bad.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.name}: {n} parameters")
    assert bad == [], "pass an option group or a record:\n" + "\n".join(bad)


def test_option_groups_stay_small():
    """No ``*Options`` or ``*Inputs`` record holds more than MAX_GROUP_FIELDS fields (its bases'
    included): a stage's knobs are one group, and :class:`RunOptions` holds the groups."""
    import dataclasses
    import importlib

    bad = []
    for f in sorted(PKG.rglob("*.py")):
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Options", "Inputs")):
                module = ".".join(f.relative_to(ROOT).with_suffix("").parts)
                cls = getattr(importlib.import_module(module), node.name)
                if dataclasses.is_dataclass(cls) and len(dataclasses.fields(cls)) > MAX_GROUP_FIELDS:
                    bad.append(f"{module}.{node.name}: {len(dataclasses.fields(cls))} fields")
    assert bad == [], "\n".join(bad)
