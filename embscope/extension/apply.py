"""``apply``: write the extended model — a full transformers folder, or only the new rows.

Full folder (the whole model loads, see :mod:`embscope.models.fullmodel`; GGUF inputs too): the
extended tokenizer that :func:`~embscope.extension.suggest` measured (new merges or pieces in its
model, :mod:`embscope.tokenizer.extend`; added tokens with ``--as added``), the embeddings resized
(``resize_token_embeddings``) and the new rows set by the chosen strategy, ``config.vocab_size``
updated, saved as safetensors. It loads with ``AutoTokenizer.from_pretrained(out)`` and
``AutoModelForCausalLM.from_pretrained(out)``.

Rows only (models too large to rewrite here, or not loadable as a transformers checkpoint):
``new_rows.safetensors`` (``token_ids`` (n,), ``embed`` (n, d), ``output`` (n, d) when untied),
the extended ``tokenizer.json`` and a README with the few lines that apply them to the base model.

New ids follow the tokenizer: ``len(tokenizer)``, ``len(tokenizer) + 1``, … (terms and the
intermediate tokens of their merge chains, in id order). A matrix padded past the tokenizer
(Qwen2: 151 665 tokens, 152 064 rows) reuses its padding rows for them and grows only when they
run out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from embscope.errors import SpecError
from embscope.models.writer import MODES, drop_auto_map, hf_tokenizer, make_readable

#: the initial rows of a model folder, beside its manifest (read by ``diff``: embscope.changes.manifest)
INITIAL_ROWS = "embscope_extension/initial_rows.safetensors"

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel
    from embscope.extension.extension import ExtensionResult


README = """# {name} + {n} domain tokens

New rows for {n} new tokens ({init} initialisation), made by embscope {version}.

- `tokenizer.json`: the base tokenizer with the new tokens ({form}; ids {first}..{last}).
- `new_rows.safetensors`: `token_ids` ({n},), `embed` ({n}, {d}){output_line}.
- `added_terms.json`: the new tokens, in id order: id, text, the tokenizer's string, kind
  (`term`, or `intermediate` of a term's merge chain).

Apply them to the base model:

```python
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

tok = PreTrainedTokenizerFast(tokenizer_file="{out}/tokenizer.json")
rows = load_file("{out}/new_rows.safetensors")
model = AutoModelForCausalLM.from_pretrained("{base}", trust_remote_code=False)
model.resize_token_embeddings(max(len(tok), model.get_input_embeddings().weight.shape[0]),
                              mean_resizing=False)
ids = rows["token_ids"]
with torch.no_grad():
    emb = model.get_input_embeddings().weight
    emb[ids] = rows["embed"].to(emb.dtype)
    if "output" in rows:  # untied models only
        head = model.get_output_embeddings().weight
        head[ids] = rows["output"].to(head.dtype)
```
"""


def apply(model: "LoadedModel", result: "ExtensionResult", out_dir: str | Path, *,
          init: str = "auto", mode: str = "auto", tokens=None, force: bool = False) -> dict:
    """Write the extended model to ``out_dir`` (atomically); returns a manifest dict.

    Args:
        model: the model :func:`suggest` ran on.
        result: from :func:`suggest`; its ``terms`` are added.
        out_dir: output folder (must not exist or be empty, unless ``force``).
        init: strategy spec, ``NAME`` or ``INPUT/OUTPUT``; ``auto`` (the default) writes the one
            :func:`suggest` recommended (``result.summary.recommended``; ``subword-mean`` when
            nothing was measured). Rows :func:`suggest` diagnosed are written as they were
            measured.
        mode: ``full`` (transformers folder), ``rows`` (new rows only) or ``auto`` (full when the
            whole model loads here, else rows).
        tokens: tokens table with ``flagged`` rows to exclude from the means.

    Example:
        >>> result = suggest(model, "corpora/medical", ExtensionOptions(top=20))  # doctest: +SKIP
        >>> apply(model, result, "out/smollm2-med")  # doctest: +SKIP
    """
    from embscope.extension.choose import FALLBACK
    from embscope.extension.extension import new_rows, reference_mask
    from embscope.extension.init import AUTO, parse_init
    from embscope.models.fullmodel import why_not_loadable
    from embscope.output import claim, write_json
    from embscope.provenance import run_stamp

    if mode not in MODES:
        raise SpecError(f"unknown apply mode {mode!r}; choose from {', '.join(MODES)}")
    asked = init
    if init == AUTO:
        init = result.summary.recommended or FALLBACK
    parse_init(init)
    reason = why_not_loadable(model)
    if mode == "full" and reason is not None:
        raise SpecError(f"cannot write a full model folder: {reason}; use the rows-only output")
    full = mode == "full" or (mode == "auto" and reason is None)

    extension = result.extension
    ext, ids = extension.tokenizer, extension.ids
    rows = result.rows.get(init)
    if rows is None:
        rows = new_rows(model, result, init, reference_mask(model, tokens))
    manifest = {
        "base_model": model.name, "base_path": str(model.path), "init": init,
        "init_reason": result.summary.recommended_why if asked == AUTO else "asked for",
        "format": "transformers" if full else "rows", "n_added": len(ids),
        "token_ids": ids, "terms": result.terms, "kinds": [t.kind for t in extension.tokens],
        "tokenizer_form": extension.form, "merges_added": len(extension.merges),
        "vocab_size": max(model.n_rows, max(ids) + 1) if ids else model.n_rows,
        "tokens_saved": result.summary.tokens_saved,
        "embscope": run_stamp("extend --apply") | {"parameters": {"init": init, "mode": mode, "top": len(ids)}},
        "note": None if full else reason, "rows_digest": None,
    }
    with claim(out_dir, force=force, inputs=[model.path], kind="model") as tmp:
        if full:
            _write_full(model, ext, ids, rows, tmp)
        else:
            _write_rows(model, extension, rows, tmp, init, out_dir)
        # what `diff` checks the rows of a folder carrying this manifest against (embscope.changes.manifest)
        from embscope.provenance import rows_digest

        if full:
            from embscope.models.load import load_model

            written = load_model(str(tmp), device="cpu")
            manifest["rows_digest"] = rows_digest(written.embed, ids)
            _write_initial(written, ids, tmp)
        elif "embed" in rows:
            manifest["rows_digest"] = rows_digest(rows["embed"], range(len(ids)))
        write_json(tmp / "embscope_extension.json", manifest)
        make_readable(tmp)
    return manifest


def _write_full(model: "LoadedModel", ext, ids, rows, tmp: Path) -> None:
    import copy

    from embscope.models.fullmodel import load_causal_lm, set_rows

    lm = copy.deepcopy(load_causal_lm(model))
    # A GGUF read through ``from_pretrained(gguf_file=...)`` is dequantised to float32 but keeps
    # transformers' GGUF quantizer, which refuses ``save_pretrained``; what is written is float32.
    if type(getattr(lm, "hf_quantizer", None)).__name__ == "GgufHfQuantizer":
        lm.hf_quantizer = None
        if hasattr(lm.config, "quantization_config"):
            del lm.config.quantization_config
    size = max(lm.get_input_embeddings().weight.shape[0], max(ids) + 1)
    lm.resize_token_embeddings(size, mean_resizing=False)
    set_rows(lm, ids, rows)
    lm.config.vocab_size = size
    if hasattr(lm.config, "auto_map"):  # never point a written model at code from the source folder
        del lm.config.auto_map
    lm.save_pretrained(str(tmp))
    hf_tokenizer(model, ext, {**model.config, **lm.config.to_dict()}).save_pretrained(str(tmp))
    drop_auto_map(tmp)


def _write_initial(written: "LoadedModel", ids, tmp: Path) -> None:
    """The new rows as the folder stores them, beside its manifest (``INITIAL_ROWS``: ``token_ids``,
    ``embed``, ``output`` when untied; float32): a folder trained in place keeps its initial rows
    for ``diff``. In a subfolder, so that loaders reading every ``*.safetensors`` of the folder never
    meet it."""
    import torch
    from safetensors.torch import save_file

    index = torch.as_tensor(list(ids), dtype=torch.int64)
    tensors = {"token_ids": index.clone(), "embed": written.embed[index].float().contiguous()}
    if written.output is not None:
        tensors["output"] = written.output[index].float().contiguous()
    (tmp / INITIAL_ROWS).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(tmp / INITIAL_ROWS))


def _write_rows(model: "LoadedModel", extension, rows, tmp: Path, init: str, out_dir) -> None:
    import torch
    from safetensors.torch import save_file

    from embscope import __version__

    ids = extension.ids
    tensors = {"token_ids": torch.tensor(ids, dtype=torch.int64),
               **{k: v.float().contiguous() for k, v in rows.items()}}
    save_file(tensors, str(tmp / "new_rows.safetensors"))
    extension.tokenizer.save(str(tmp / "tokenizer.json"))
    (tmp / "added_terms.json").write_text(json.dumps(
        [{"id": t.id, "term": t.text, "piece": t.piece, "kind": t.kind} for t in extension.tokens],
        ensure_ascii=False, indent=1) + "\n", "utf-8")
    forms = {"merges": "merges appended to its BPE model", "pieces": "scored pieces in its Unigram model",
             "vocab": "entries of its WordPiece vocabulary", "added": "added tokens"}
    (tmp / "README.md").write_text(README.format(
        name=model.name, n=len(ids), init=init, version=__version__, first=min(ids), last=max(ids),
        form=forms.get(extension.form, extension.form),
        d=model.dim, output_line=f", `output` ({len(ids)}, {model.dim})" if "output" in rows else "",
        out=Path(out_dir).as_posix(), base=model.spec), "utf-8")
