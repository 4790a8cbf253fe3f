"""``repair``: re-initialise flagged (under-trained) rows before a fine-tune reaches them.

A row the pre-training never moved gets a large, badly scaled update the first time its token
appears; it can also swallow probability mass when the head is tied. Repair gives such rows a
sensible starting point with the extension strategies of :mod:`embscope.extension.init`, as if each
token were a new one:

- the "pieces" of a row are the tokens of its own text when that text is encoded *without* the row
  itself: the text is encoded, and while the row's id is still in the result the text is halved and
  each half encoded again. ``"MetaInfoClass"`` → ``["Meta", "Info", "Class"]``; a single character
  or byte that no other token spells has no pieces and gets the trained mean;
- ``subword-mean`` (default): the mean of the pieces' rows; ``mean``: the trained mean;
  ``hewitt``, ``weighted-subword``, ``knn-pull`` as in the extension. ``IN/OUT`` picks per matrix
  on untied models.

The means run over trained rows only: the repaired rows and every other flagged row are excluded.

Output: a transformers model folder (when the whole model loads, see
:mod:`embscope.models.fullmodel`), or ``repaired_rows.safetensors`` (``token_ids``, ``embed``,
``output`` when untied) with a README that applies them. ``embscope_repair.json`` holds the
manifest and the diagnostics of :mod:`embscope.extension.diagnostics`: norm percentiles and nearest
trained tokens of the new rows and, when the model loads, next-token KL(p_old ‖ p_new) and the
probability mass on the repaired tokens, measured by running the old and the repaired model on
held-out text (both inputs and outputs change here, so the model is simply run twice).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from embscope.models.model import LoadedModel

#: halvings tried before a row is left without pieces
MAX_SPLITS = 6

README = """# {name} with {n} repaired token rows

Rows re-initialised with `{init}` by embscope {version}: `repaired_rows.safetensors` holds
`token_ids` ({n},), `embed` ({n}, {d}){output_line}. `embscope_repair.json` lists the tokens and
the diagnostics.

```python
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

rows = load_file("{out}/repaired_rows.safetensors")
model = AutoModelForCausalLM.from_pretrained("{base}")
layers = {{"embed": model.get_input_embeddings(), "output": model.get_output_embeddings()}}
with torch.no_grad():
    for name, layer in layers.items():
        if name in rows:  # "output" only for untied models
            layer.weight[rows["token_ids"]] = rows[name].to(layer.weight.dtype)
```
"""


def other_pieces(vocab, row: int) -> list[int]:
    """Token ids that spell ``row``'s text without ``row`` itself (see the module docstring).

    >>> class V:  # a toy vocabulary: "ab" is token 2, "a" 0, "b" 1
    ...     def __len__(self): return 3
    ...     def token_bytes(self, i): return [b"a", b"b", b"ab"][i]
    ...     def encode(self, t): return {"ab": [2], "a": [0], "b": [1]}[t]
    >>> other_pieces(V(), 2)
    [0, 1]
    """
    b = vocab.token_bytes(row) if row < len(vocab) else None
    if not b:
        return []
    try:
        text = b.decode("utf-8")
    except UnicodeDecodeError:
        return []

    def split(t: str, depth: int) -> list[int]:
        ids = vocab.encode(t)
        if row not in ids:
            return list(ids)
        if len(t) < 2 or depth >= MAX_SPLITS:
            return []
        mid = len(t) // 2
        return split(t[:mid], depth + 1) + split(t[mid:], depth + 1)

    return split(text, 0)


def repaired_rows(model: "LoadedModel", rows: Sequence[int], init: str = "subword-mean",
                  flagged: Sequence[int] = ()) -> tuple[dict[str, "torch.Tensor"], dict[str, Any], list[list[int]]]:
    """``({"embed", "output"?}, contexts, pieces)``: the new rows for ``rows`` by strategy ``init``."""
    from embscope.extension.extension import init_contexts
    from embscope.extension.init import initialise, parse_init, trained_mask

    names = dict(zip(("embed", "output"), parse_init(init)))
    if model.vocab is None:
        raise SpecError(f"{model.name} ships no tokenizer; repair needs one to find each token's pieces")
    pieces = [other_pieces(model.vocab, int(r)) for r in rows]
    trained = trained_mask(model.categories, model.n_rows, sorted({*map(int, rows), *map(int, flagged)}))
    ctxs = init_contexts(model, pieces, trained)
    return {k: initialise(names[k], ctx) for k, ctx in ctxs.items()}, ctxs, pieces


def _kl_mass(lm_old, lm_new, ids: list[int], rows: list[int]) -> dict[str, float]:
    """Mean/max over positions of KL(p_old ‖ p_new) and of p_new's mass on ``rows``."""
    import torch

    from embscope.extension.diagnostics import hidden_and_logits

    _, old = hidden_and_logits(lm_old, ids)
    _, new = hidden_and_logits(lm_new, ids)
    lp_old = torch.log_softmax(old.double(), dim=-1)
    lp_new = torch.log_softmax(new.double(), dim=-1)
    kl = (lp_old.exp() * (lp_old - lp_new)).sum(-1)
    mass = lp_new[:, rows].exp().sum(-1)
    return {"kl": float(kl.mean()), "kl_max": float(kl.max()),
            "new_token_mass": float(mass.mean()), "new_token_mass_max": float(mass.max())}


def repair(model: "LoadedModel", rows: Sequence[int], out_dir: str | Path, *, init: str = "subword-mean",
           mode: str = "auto", flagged: Sequence[int] = (), force: bool = False) -> dict[str, Any]:
    """Write ``model`` with ``rows`` re-initialised to ``out_dir`` (atomically); returns the manifest.

    Args:
        model: the scanned model.
        rows: row ids to repair (e.g. the flagged rows the corpus uses, :mod:`embscope.geometry.usage`).
        out_dir: output folder (must not exist or be empty, unless ``force``).
        init: strategy spec, ``NAME`` or ``INPUT/OUTPUT``.
        mode: ``full`` (transformers folder), ``rows`` (rows file) or ``auto`` (full when it loads).
        flagged: every flagged row, kept out of the means along with ``rows``.
    """
    import copy
    import dataclasses

    import torch

    from embscope.extension.diagnostics import HELD_OUT_TEXT, row_diagnostics
    from embscope.models.fullmodel import load_causal_lm, load_hf_tokenizer, set_rows, why_not_causal
    from embscope.models.writer import MODES, drop_auto_map, hf_tokenizer, make_readable
    from embscope.output import claim, write_json
    from embscope.provenance import run_stamp

    rows = sorted({int(r) for r in rows})
    if not rows:
        raise SpecError("no rows to repair: the scan flagged none that the corpus uses; nothing to write")
    if mode not in MODES:
        raise SpecError(f"unknown repair mode {mode!r}; choose from {', '.join(MODES)}")
    if rows[0] < 0 or rows[-1] >= model.n_rows:
        raise SpecError(f"row ids must lie in 0..{model.n_rows - 1}; got {rows[0]}..{rows[-1]}")
    reason = why_not_causal(model)
    if mode == "full" and reason is not None:
        raise SpecError(f"cannot write a full model folder: {reason}; use the rows-only output")
    full = mode == "full" or (mode == "auto" and reason is None)

    new, ctxs, pieces = repaired_rows(model, rows, init, flagged)
    strings = model.token_strings()
    tokens = [strings[r] for r in rows]
    diag = row_diagnostics(init, new["embed"], ctxs["embed"], tokens, strings)
    if "output" in new:
        diag.add_output(row_diagnostics(init, new["output"], ctxs["output"], tokens, strings))
    lm_new = None
    note = reason
    if reason is None:
        lm_old = load_causal_lm(model)
        lm_new = copy.deepcopy(lm_old)
        set_rows(lm_new, rows, new)
        held = model.vocab.encode(HELD_OUT_TEXT)
        diag = dataclasses.replace(diag, **_kl_mass(lm_old, lm_new, held, rows))
        note = f"held-out general English text, {len(held)} tokens; old and repaired model both run"
    manifest = {
        "base_model": model.name, "base_path": str(model.path), "init": init,
        "format": "transformers" if full else "rows", "n_repaired": len(rows), "token_ids": rows,
        "tokens": tokens, "pieces": pieces, "diagnostics": diag.to_dict(), "kl_note": note,
        "embscope": run_stamp("repair") | {"parameters": {"init": init, "mode": mode, "rows": len(rows)}},
    }
    with claim(out_dir, force=force, inputs=[model.path], kind="model") as tmp:
        if full:
            if hasattr(lm_new.config, "auto_map"):  # never point a written model at foreign code
                del lm_new.config.auto_map
            lm_new.save_pretrained(str(tmp))
            hf_tokenizer(model, load_hf_tokenizer(model), {**model.config, **lm_new.config.to_dict()}) \
                .save_pretrained(str(tmp))
            drop_auto_map(tmp)
        else:
            from safetensors.torch import save_file

            from embscope import __version__

            save_file({"token_ids": torch.tensor(rows, dtype=torch.int64),
                       **{k: v.float().contiguous() for k, v in new.items()}}, str(tmp / "repaired_rows.safetensors"))
            (tmp / "README.md").write_text(README.format(
                name=model.name, n=len(rows), init=init, version=__version__, d=model.dim,
                output_line=f", `output` ({len(rows)}, {model.dim})" if "output" in new else "",
                out=Path(out_dir).as_posix(), base=model.spec), "utf-8")
        write_json(tmp / "embscope_repair.json", manifest)
        make_readable(tmp)
    return manifest
