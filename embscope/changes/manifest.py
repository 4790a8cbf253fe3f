"""The initial rows of tokens added by ``embscope extend --apply``: what a new row is compared with.

``extend --apply OUT`` writes ``OUT/embscope_extension.json`` (:func:`embscope.extension.apply`):
``token_ids``, ``terms``, ``init``, ``rows_digest`` and ``format`` — ``transformers`` (OUT is the
extended model, whose rows at ``token_ids`` are the initial rows, kept also in
``OUT/embscope_extension/initial_rows.safetensors`` so a folder trained in place still has them) or
``rows`` (``OUT/new_rows.safetensors`` holds ``token_ids``, ``embed`` and, untied, ``output``).
``--manifest`` takes the file or its folder. Without it :func:`find` looks in BASE's folder, in
TUNED's, and next to them (their parent folders and the folders beside them, where a training run's
output usually sits beside the ``extend --apply`` folder it started from); a manifest found there is
used only when its terms are TUNED's tokens at its ids and its initial rows are still the ones it
recorded (``rows_digest``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embscope.errors import ModelFileError, SpecError
from embscope.extension.apply import INITIAL_ROWS  # the sidecar of a model folder: its initial rows as written

MANIFEST = "embscope_extension.json"
#: largest manifest read (a 100k-token extension is a few MB)
MAX_BYTES = 64 << 20


@dataclass
class Initial:
    """New tokens and their initial rows."""

    #: the manifest file
    path: Path
    #: ids of the added tokens, in the manifest's order
    ids: np.ndarray
    #: their terms (untrusted text)
    terms: list[str]
    #: the initialisation strategy that wrote them
    init: str
    #: (k, d) float32 initial input rows
    embed: Any
    #: (k, d) float32 initial head rows, None when the extended model is tied
    output: Any
    #: the format the rows were stored in (``F32`` …)
    format: str
    #: the folder of the extended model (``transformers`` manifests), else None
    folder: Path | None


#: manifests looked at next to BASE and TUNED at most (a folder of many runs)
MAX_NEARBY = 64


def find(path: str | Path | None, base_path: str | Path | None = None,
         tuned_path: str | Path | None = None, *, fits=None) -> Path | None:
    """The manifest file for ``--manifest PATH`` (a file or a folder holding one); else the first
    of :func:`nearby` (BASE's folder, TUNED's, then next to them) that ``fits(ids, terms)`` (TUNED's
    tokenizer has those terms at those ids; every one when ``fits`` is None) and whose initial rows
    are intact (:func:`intact`); else None."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / MANIFEST
        if not p.is_file():
            raise SpecError(f"--manifest {path} is not {MANIFEST} or a folder holding one; pass the folder "
                            "`embscope extend --apply` wrote")
        return p
    for p in nearby(base_path, tuned_path):
        try:
            _, ids, terms = _doc(p)
            if (fits is None or fits(ids, terms)) and intact(p) is not False:
                return p
        except (ModelFileError, SpecError, OSError, ValueError):
            continue  # a manifest of something else, or unreadable: not this diff's
    return None


def nearby(base_path: str | Path | None, tuned_path: str | Path | None) -> list[Path]:
    """Manifest files that may belong to this diff, nearest first: in BASE's folder, in TUNED's,
    in their parent folders, then in the folders beside them and beside their parents (sorted by
    name; at most :data:`MAX_NEARBY`). ``out/ext`` (``extend --apply``) beside ``out/tuned`` (the
    training run's output) is found from either; so is ``out/ext`` from ``out/tuned/checkpoint-500``."""
    firsts, parents = [], []
    for where in (base_path, tuned_path):
        if where is None:
            continue
        folder = Path(where).expanduser()
        folder = folder if folder.is_dir() else folder.parent
        firsts.append(folder)
        parents += [folder.parent, folder.parent.parent]
    seen: dict[Path, None] = {}
    for folder in [*firsts, *parents]:
        seen.setdefault(folder / MANIFEST)
    for folder in parents:
        try:
            beside = sorted(c for c in folder.iterdir() if c.is_dir())
        except OSError:
            continue
        for c in beside[:MAX_NEARBY]:
            seen.setdefault(c / MANIFEST)
    return [p for p in list(seen)[:MAX_NEARBY * 2] if p.is_file()]


def _doc(path: Path) -> tuple[dict, list[int], list[str]]:
    """The manifest's JSON, its ``token_ids`` and its ``terms``, checked (one line when not)."""
    from embscope.formats.files import read_json

    doc = read_json(path, what="extension manifest", max_bytes=MAX_BYTES)
    ids, terms = (doc.get("token_ids"), doc.get("terms")) if isinstance(doc, dict) else (None, None)
    if not (isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)
            and isinstance(terms, list) and len(terms) == len(ids) and all(isinstance(t, str) for t in terms)):
        raise ModelFileError(f"{path} has no token_ids/terms lists of equal length; pass the manifest "
                             "`embscope extend --apply` wrote")
    return doc, ids, terms


def read_token_ids(path: Path) -> list[int]:
    """The ids of the tokens the manifest at ``path`` added (checked as :func:`read` checks them)."""
    return _doc(path)[1]


def _folder_digest(path: Path, ids: list[int]) -> str | None:
    """The ``rows_digest`` of the rows at ``ids`` in the model folder holding the manifest ``path``
    (None when it has fewer rows)."""
    from embscope.models.load import load_model
    from embscope.provenance import rows_digest

    m = load_model(str(path.parent), device="cpu", tokens_past_rows=True)
    return rows_digest(m.embed, ids) if max(ids, default=-1) < m.n_rows else None


def untouched(path: Path) -> bool | None:
    """Whether the folder of a ``transformers`` manifest still holds the rows it wrote (its
    ``rows_digest``); None when the manifest records none (an older one) or is not of that
    format."""
    doc, ids, _ = _doc(path)
    want = doc.get("rows_digest")
    if doc.get("format") != "transformers" or not isinstance(want, str):
        return None
    return _folder_digest(path, ids) == want


def intact(path: Path) -> bool | None:
    """Whether the initial rows a manifest recorded can still be read as written: the folder's rows
    (:func:`untouched`), else its :data:`INITIAL_ROWS` sidecar, else a rows-only manifest's
    ``new_rows.safetensors``, hash to its ``rows_digest``. None when it records no digest."""
    from embscope.provenance import rows_digest

    doc, ids, _ = _doc(path)
    want = doc.get("rows_digest")
    if not isinstance(want, str):
        return None
    if doc.get("format") == "transformers" and untouched(path):
        return True
    side = _sidecar(path, doc)
    if side is None or not side.is_file():
        return False
    rows = _rows_file(side, ids, path)
    return rows_digest(rows[0], range(len(ids))) == want


def _sidecar(path: Path, doc: dict) -> Path | None:
    """The file of initial rows beside a manifest: ``new_rows.safetensors`` (rows-only) or
    :data:`INITIAL_ROWS` (a model folder)."""
    fmt = doc.get("format")
    return path.parent / ("new_rows.safetensors" if fmt == "rows" else INITIAL_ROWS) if fmt in ("rows", "transformers") \
        else None


def _rows_file(f: Path, ids: list[int], path: Path):
    """``(embed, output or None, stored format)`` of a rows file (``token_ids``, ``embed``,
    ``output``), checked against the manifest's ids."""
    from embscope.changes.noise import canonical
    from embscope.formats.safetensors import read_header, read_tensor

    header = read_header(f)
    if "embed" not in header or "token_ids" not in header:
        raise ModelFileError(f"{f} has no embed/token_ids tensors; re-run extend --apply")
    got = read_tensor(f, "token_ids", header).tolist()
    if got != ids:
        raise ModelFileError(f"{f}'s token_ids differ from {path.name}'s; re-run extend --apply")
    embed = read_tensor(f, "embed", header).float()
    out = read_tensor(f, "output", header).float() if "output" in header else None
    return embed, out, canonical(header["embed"]["dtype"])


def read(path: Path, *, dim: int, verify: bool = True) -> Initial:
    """Read the manifest and the initial rows it points at (``dim``: the rows' width): a model
    folder's rows at ``token_ids`` while they hash to its ``rows_digest``, else (trained in place
    since) its :data:`INITIAL_ROWS` sidecar; a rows-only manifest's ``new_rows.safetensors``. With
    ``verify``, rows that do not hash to the manifest's ``rows_digest`` (when it records one) are a
    one-line :class:`ModelFileError`: they are not the rows ``extend --apply`` wrote, so they are not
    trusted as initial rows."""
    import torch

    from embscope.provenance import rows_digest

    doc, ids, terms = _doc(path)
    fmt = doc.get("format")
    folder, want = path.parent, doc.get("rows_digest")
    side = _sidecar(path, doc)
    if fmt == "rows":
        if not side.is_file():
            raise ModelFileError(f"{path} says rows-only but {side.name} is missing beside it; re-run extend --apply")
        embed, out, stored = _rows_file(side, ids, path)
        src = None
    elif fmt == "transformers":
        from embscope.changes.tuned import matrix_format
        from embscope.models.load import load_model

        m = load_model(str(folder), device="cpu")
        if ids and max(ids) >= m.n_rows:
            raise ModelFileError(f"{path} lists token {max(ids)} but {folder.name} has {m.n_rows} rows; re-run "
                                 "extend --apply")
        index = torch.as_tensor(ids, dtype=torch.int64)
        embed = m.embed[index].float()
        out = m.output[index].float() if m.output is not None else None
        stored, src = matrix_format(m, "embed"), folder
        if verify and isinstance(want, str) and side.is_file() and rows_digest(embed, range(len(ids))) != want:
            embed, out, stored = _rows_file(side, ids, path)  # trained in place: the rows as written
            src = None
    else:
        raise ModelFileError(f"{path} has format {fmt!r}, not transformers or rows; pass the manifest "
                             "`embscope extend --apply` wrote")
    if verify and isinstance(want, str) and rows_digest(embed, range(len(ids))) != want:
        where = side.name if fmt == "rows" else f"the rows of {folder.name} at its token_ids"
        raise ModelFileError(f"{where} are not the rows {path.name} recorded (rows_digest differs): edited, replaced "
                             "or trained since extend --apply; pass the manifest and rows extend --apply wrote")
    if embed.shape != (len(ids), dim):
        raise ModelFileError(f"the initial rows of {path.name} are {tuple(embed.shape)}, not ({len(ids)}, {dim}); "
                             "pass the manifest of the extension TUNED was trained from")
    return Initial(path=path, ids=np.asarray(ids, dtype=np.int64), terms=list(terms), init=str(doc.get("init") or "?"),
                   embed=embed, output=out, format=stored, folder=src)
