"""Print which embscope packages each package imports (function-level imports included).

    python -m scripts.import_graph            # this checkout
    python -m scripts.import_graph --modules  # module by module
    python -m scripts.import_graph --root /path/to/other/checkout

A "package" is the first name under ``embscope`` (``corpus``, ``models``, ``runner``, ...). An
edge ``a -> b`` means some module of ``a`` imports some module of ``b``. ``tests/test_structure.py``
reads the same graph to check the layer order, cycles and private names.
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """``{"embscope.corpus.engine": path, "embscope.corpus": path/__init__.py, ...}``"""
    mods = {}
    for f in (root / "embscope").rglob("*.py"):
        name = ".".join(f.relative_to(root).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = f
    return mods


def imports(root: Path = ROOT) -> dict[str, list[tuple[str, list[str]]]]:
    """module → ``[(imported module, names taken from it), ...]`` for every embscope import."""
    mods = modules(root)
    out: dict[str, list[tuple[str, list[str]]]] = {m: [] for m in mods}
    for m, f in mods.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("embscope"):
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    out[m].append((sub, []) if sub in mods else (node.module, [a.name]))
            elif isinstance(node, ast.Import):
                out[m] += [(a.name, []) for a in node.names if a.name.startswith("embscope")]
    return out


def edges(root: Path = ROOT) -> dict[str, set[str]]:
    """module → embscope modules it imports. Importing ``a.b.c`` runs ``a.b``'s ``__init__`` too,
    except a module's own enclosing packages, which Python has already run before it."""
    mods = modules(root)
    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, targets in imports(root).items():
        own = {".".join(m.split(".")[:i]) for i in range(1, m.count(".") + 1)}
        for t, _ in targets:
            parts = t.split(".")
            for i in range(2, len(parts) + 1):
                name = ".".join(parts[:i])
                if name in mods and name != m and name not in own:
                    out[m].add(name)
    return out


def package(module: str) -> str:
    """``embscope.corpus.engine`` → ``corpus``; ``embscope`` → ``embscope``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_edges(root: Path = ROOT) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for m, targets in edges(root).items():
        out.setdefault(package(m), set()).update(package(t) for t in targets if package(t) != package(m))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout to read (default: this one)")
    ap.add_argument("--modules", action="store_true", help="module by module instead of by package")
    args = ap.parse_args(argv)
    graph = edges(args.root) if args.modules else package_edges(args.root)
    width = max(map(len, graph))
    for name in sorted(graph):
        print(f"{name:<{width}} -> {', '.join(sorted(graph[name])) or '(nothing)'}")


if __name__ == "__main__":
    main()
