"""The input embedding in the TensorBoard Embedding Projector's formats.

The projector (Smilkov et al. 2016, "Embedding Projector: Interactive Visualization and
Interpretation of Embeddings"; the TensorBoard plugin and the standalone page at
projector.tensorflow.org) reads:

- ``tensors.tsv``: one row per point, its values tab-separated, no header;
- ``metadata.tsv``: one line per point, in the same order, with a header line naming the columns
  (the projector takes the first line as a header when there is more than one column); values
  may hold no tab or newline;
- ``projector_config.json`` for the standalone projector: ``{"embeddings": [{"tensorName",
  "tensorShape": [n, d], "tensorPath", "metadataPath"}]}``, and ``projector_config.pbtxt`` for
  TensorBoard (``tensorboard --logdir DIR``): the same as a ``ProjectorConfig`` text proto with
  ``tensor_path`` pointing at the TSV.

A vocabulary of 150k rows × 3584 is ~5 GB of TSV and more than the page can hold, so a sample is
written by default: every flagged row, then a seeded uniform draw of the others up to ``sample``
rows, in token-id order (``sample=0``: every row).

Token strings are untrusted, and ``metadata.tsv`` is also a file people open in a spreadsheet: a
text cell starting with ``=``, ``+``, ``-`` or ``@`` would run as a formula there (CSV/formula
injection, OWASP), so such a cell is written with a ``'`` in front (``'=HYPERLINK(…)``), the
spreadsheets' own mark for "text, not a formula". Numbers are written as they are (``-1.5``); the
Atlas export (:mod:`embscope.report.atlas`) keeps the raw strings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: rows written by default (the projector's page stays responsive up to about this many)
DEFAULT_SAMPLE = 10_000
#: rows converted to text per step (bounded memory for large matrices)
STEP = 4096
#: metadata columns, when the table has them (``token`` is shown as the report shows it)
META = ("token_id", "token", "category", "script", "flagged", "flag_reason", "undertrained_score")


def sample_rows(tokens, sample: int, seed: int = 0) -> list[int]:
    """Rows to write: all when ``sample`` is 0 or at least the table; else every flagged row,
    then a seeded uniform draw of the rest, up to ``sample``; sorted.

    >>> import polars as pl
    >>> sample_rows(pl.DataFrame({"flagged": [False, True, False, False]}), 2, seed=0)[:1] != []
    True
    """
    import numpy as np

    n = tokens.height
    if sample <= 0 or sample >= n:
        return list(range(n))
    flagged = np.flatnonzero(tokens["flagged"].fill_null(False).to_numpy()) if "flagged" in tokens.columns \
        else np.array([], dtype=np.int64)
    chosen = flagged[:sample]
    rest = np.setdiff1d(np.arange(n), chosen)
    take = np.random.default_rng(seed).choice(rest, size=sample - len(chosen), replace=False)
    return sorted(int(i) for i in np.concatenate([chosen, take]))


#: first characters that make a spreadsheet read a cell as a formula
FORMULA_STARTS = ("=", "+", "-", "@")


def _cell(v: Any) -> str:
    r"""One TSV cell: numbers as they are, text with tabs and newlines escaped and a formula start
    neutralised.

    >>> [_cell(x) for x in (None, -1.5, True, "a\tb", "=1+1", "-x", "plain")]
    ['', '-1.5', 'True', 'a\\tb', "'=1+1", "'-x", 'plain']
    """
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    if not isinstance(v, str):
        return str(v)
    s = v.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return "'" + s if s.startswith(FORMULA_STARTS) else s


def write_projector(tokens, embed, out: Path, *, name: str, sample: int = DEFAULT_SAMPLE) -> dict[str, Any]:
    """Write ``tensors.tsv``, ``metadata.tsv``, ``projector_config.json`` and ``.pbtxt`` into ``out``.

    Args:
        tokens: ``tokens.parquet`` as a polars DataFrame (one row per matrix row).
        embed: the input embedding, ``(rows, hidden)``, any float dtype (written as float32, 6
            significant digits).
        out: a folder being written (the caller claims it).
        name: the tensor's name in the projector (the model's name).
        sample: rows to write (see the module docstring); 0 for all.
    Returns:
        ``{"rows", "dim", "files"}``.
    """
    import numpy as np

    from embscope.errors import SpecError
    from embscope.report.escape import display_token
    from embscope.report.token_table import check_columns

    check_columns(tokens, [*META, "flagged"])
    if tokens.height != embed.shape[0]:
        raise SpecError(f"tokens.parquet has {tokens.height} rows but the embedding has {embed.shape[0]}; "
                        "pass the model this report was made from")
    out = Path(out)
    rows = sample_rows(tokens, sample)
    dim = int(embed.shape[1])
    with open(out / "tensors.tsv", "w", encoding="ascii", newline="\n") as fh:
        for s in range(0, len(rows), STEP):
            idx = rows[s:s + STEP]
            block = embed[idx].float().cpu().numpy() if hasattr(embed, "float") else np.asarray(embed[idx], np.float32)
            np.savetxt(fh, block, fmt="%.6g", delimiter="\t")
    cols = [c for c in META if c in tokens.columns]
    sub = tokens[rows].select(cols)
    with open(out / "metadata.tsv", "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\t".join(cols) + "\n")
        for rec in sub.iter_rows():
            fh.write("\t".join(_cell(display_token(v) if c == "token" else v) for c, v in zip(cols, rec)) + "\n")
    config = {"embeddings": [{"tensorName": name, "tensorShape": [len(rows), dim],
                              "tensorPath": "tensors.tsv", "metadataPath": "metadata.tsv"}]}
    (out / "projector_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (out / "projector_config.pbtxt").write_text(
        "embeddings {\n"
        f"  tensor_name: {json.dumps(name)}\n"
        '  tensor_path: "tensors.tsv"\n'
        '  metadata_path: "metadata.tsv"\n'
        f"  tensor_shape: {len(rows)}\n"
        f"  tensor_shape: {dim}\n"
        "}\n", encoding="utf-8")
    return {"rows": len(rows), "dim": dim,
            "files": ["tensors.tsv", "metadata.tsv", "projector_config.json", "projector_config.pbtxt"]}
