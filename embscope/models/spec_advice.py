"""Advice for a model spec that names no model: a packaged tokenizer name, or a local path with a
typo, either of which would otherwise be taken for a hub id and sent to the hub."""

from __future__ import annotations

from pathlib import Path

from embscope.errors import SpecError


def not_a_model(spec: str) -> None:
    """Raise the right advice for a spec that is no model and would otherwise be taken for a hub id:
    a packaged tokenizer name (``o200k_base``), or a local path that does not exist (its first
    folder exists here, or it starts with ``./``, ``../``, ``~`` or ``/``): a typo, never a hub
    download.

    >>> not_a_model("o200k_base")
    Traceback (most recent call last):
    embscope.errors.SpecError: 'o200k_base' is a tokenizer, not a model: it has no embedding rows; pass a model (`embscope models` lists the aliases), or measure the tokenizer with: embscope fertility -t o200k_base
    >>> not_a_model("embscope/no-such-model")
    Traceback (most recent call last):
    embscope.errors.SpecError: no model folder or file at 'embscope/no-such-model' (the folder embscope/ is here, so this is a local path, not a hub id); check the path: embscope/ holds ...
    """
    from embscope.tokenizer.load import PACKAGED_TOKENIZERS

    if spec in PACKAGED_TOKENIZERS:
        raise SpecError(f"{spec!r} is a tokenizer, not a model: it has no embedding rows; pass a model "
                        f"(`embscope models` lists the aliases), or measure the tokenizer with: "
                        f"embscope fertility -t {spec}")
    parts = Path(spec).parts
    head = Path(parts[0]).expanduser() if parts else None
    explicit = spec.startswith(("./", "../", "~", "/"))
    if head is None or not (explicit or (len(parts) > 1 and head.is_dir())):
        return
    # the deepest folder of the path that exists, and what it holds (the names a typo is near)
    have = Path(spec).expanduser()
    while not have.is_dir() and have != have.parent:
        have = have.parent
    try:
        names = sorted(p.name for p in have.iterdir() if not p.name.startswith("."))
    except OSError:
        names = []
    shown = ", ".join(names[:6]) + (", …" if len(names) > 6 else "") if names else "nothing"
    where = f"the folder {parts[0]}/ is here, so this is a local path, not a hub id" if not explicit else "a local path"
    raise SpecError(f"no model folder or file at {spec!r} ({where}); check the path: {str(have).rstrip('/')}/ holds {shown}")
