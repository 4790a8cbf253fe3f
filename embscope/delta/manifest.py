"""The initial rows of tokens added by ``embscope extend --apply``: what a new row is compared with.

``extend --apply OUT`` writes ``OUT/embscope_extension.json`` (:func:`embscope.extension.apply`):
``token_ids``, ``terms``, ``init`` and ``format`` — ``transformers`` (OUT is the extended model,
whose rows at ``token_ids`` are the initial rows) or ``rows`` (``OUT/new_rows.safetensors`` holds
``token_ids``, ``embed`` and, untied, ``output``). ``--manifest`` takes the file or its folder; a
BASE folder that carries one is read without asking.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from embscope.errors import ModelFileError, SpecError

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


def find(path: str | Path | None, base_path: str | Path | None = None,
         tuned_path: str | Path | None = None) -> Path | None:
    """The manifest file for ``--manifest PATH`` (a file or a folder holding one), else the one in
    BASE's folder, else the one in TUNED's folder, else None."""
    if path is not None:
        p = Path(path).expanduser()
        if p.is_dir():
            p = p / MANIFEST
        if not p.is_file():
            raise SpecError(f"--manifest {path} is not {MANIFEST} or a folder holding one; pass the folder "
                            "`embscope extend --apply` wrote")
        return p
    for where in (base_path, tuned_path):
        if where is None:
            continue
        folder = Path(where)
        folder = folder if folder.is_dir() else folder.parent
        if (folder / MANIFEST).is_file():
            return folder / MANIFEST
    return None


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


def untouched(path: Path) -> bool | None:
    """Whether the folder of a ``transformers`` manifest still holds the rows it wrote (its
    ``rows_digest``); None when the manifest records none (an older one) or is not of that
    format."""
    from embscope.models.load import load_model
    from embscope.provenance import rows_digest

    doc, ids, _ = _doc(path)
    want = doc.get("rows_digest")
    if doc.get("format") != "transformers" or not isinstance(want, str):
        return None
    m = load_model(str(path.parent), device="cpu", tokens_past_rows=True)
    if max(ids, default=-1) >= m.n_rows:
        return False
    return rows_digest(m.embed, ids) == want


def read(path: Path, *, dim: int, verify: bool = True) -> Initial:
    """Read the manifest and the initial rows it points at (``dim``: the rows' width). With
    ``verify``, rows that do not hash to the manifest's ``rows_digest`` (when it records one) are
    a one-line :class:`ModelFileError`: they are not the rows ``extend --apply`` wrote, so they are
    not trusted as initial rows."""
    import torch

    from embscope.delta.noise import canonical
    from embscope.provenance import rows_digest

    doc, ids, terms = _doc(path)
    fmt = doc.get("format")
    folder = path.parent
    if fmt == "rows":
        from embscope.formats.safetensors import read_header, read_tensor

        f = folder / "new_rows.safetensors"
        if not f.is_file():
            raise ModelFileError(f"{path} says rows-only but {f.name} is missing beside it; re-run extend --apply")
        header = read_header(f)
        if "embed" not in header or "token_ids" not in header:
            raise ModelFileError(f"{f} has no embed/token_ids tensors; re-run extend --apply")
        got = read_tensor(f, "token_ids", header).tolist()
        if got != ids:
            raise ModelFileError(f"{f}'s token_ids differ from {path.name}'s; re-run extend --apply")
        embed = read_tensor(f, "embed", header).float()
        out = read_tensor(f, "output", header).float() if "output" in header else None
        stored, src = canonical(header["embed"]["dtype"]), None
    elif fmt == "transformers":
        from embscope.models.load import load_model

        m = load_model(str(folder), device="cpu")
        if ids and max(ids) >= m.n_rows:
            raise ModelFileError(f"{path} lists token {max(ids)} but {folder.name} has {m.n_rows} rows; re-run "
                                 "extend --apply")
        index = torch.as_tensor(ids, dtype=torch.int64)
        embed = m.embed[index].float()
        out = m.output[index].float() if m.output is not None else None
        from embscope.delta.tuned import matrix_format

        stored, src = matrix_format(m, "embed"), folder
    else:
        raise ModelFileError(f"{path} has format {fmt!r}, not transformers or rows; pass the manifest "
                             "`embscope extend --apply` wrote")
    want = doc.get("rows_digest")
    if verify and isinstance(want, str) and rows_digest(embed, range(len(ids))) != want:
        where = "new_rows.safetensors" if fmt == "rows" else f"the rows of {folder.name} at its token_ids"
        raise ModelFileError(f"{where} are not the rows {path.name} recorded (rows_digest differs): edited, replaced "
                             "or trained since extend --apply; pass the manifest and rows extend --apply wrote")
    if embed.shape != (len(ids), dim):
        raise ModelFileError(f"the initial rows of {path.name} are {tuple(embed.shape)}, not ({len(ids)}, {dim}); "
                             "pass the manifest of the extension TUNED was trained from")
    return Initial(path=path, ids=np.asarray(ids, dtype=np.int64), terms=list(terms), init=str(doc.get("init") or "?"),
                   embed=embed, output=out, format=stored, folder=src)
