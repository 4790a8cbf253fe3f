"""TUNED read as two row sources and a tokenizer: any model spec embscope loads (its embedding and
head only), or a PEFT adapter folder laid over BASE's matrices (:mod:`embscope.changes.peft`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.changes.record import TunedFingerprint
from embscope.changes.rows import Dense, Rows

if TYPE_CHECKING:  # pragma: no cover
    from embscope.changes.record import AdapterInfo
    from embscope.models.model import LoadedModel


@dataclass
class Tuned:
    """What the diff reads of TUNED."""

    #: the spec as given
    spec: str
    #: ``model`` (a checkpoint) or ``peft`` (an adapter on BASE)
    kind: str
    #: input embedding rows
    embed: Rows
    #: head rows; None when tied to ``embed``
    output: Rows | None
    #: a LoadedModel view for its tokenizer, config and special ids (for a PEFT adapter: BASE's,
    #: with the adapter folder's tokenizer when it ships one; its matrices are shape-only)
    model: "LoadedModel"
    #: the adapter's description (peft type, what it does to each matrix), or None
    adapter: "AdapterInfo | None"
    #: files read for the matrices
    files: list[str]

    @property
    def tied(self) -> bool:
        return self.output is None


def fingerprint(tuned: Tuned) -> TunedFingerprint:
    """XXH3-128 digests of a checkpoint's matrices, or the BLAKE2b digest of the adapter's files."""
    from embscope.provenance import tensor_digest, tree_digest

    if tuned.kind == "peft":
        return TunedFingerprint(adapter=tree_digest(Path(tuned.files[0])))
    m = tuned.model
    return TunedFingerprint(embed=tensor_digest(m.embed),
                            output=tensor_digest(m.output) if m.output is not None else None)


def matrix_format(model: "LoadedModel", which: str) -> str:
    """The stored format of ``model``'s ``embed`` or ``output`` matrix (``BF16``, ``Q8_0``, …): read
    from the safetensors header or the GGUF tensor table (a GGUF's head often has another type)."""
    from embscope.changes.noise import canonical

    name = model.tensor_names.get(which)
    if which == "output" and name is None:
        name = model.tensor_names.get("embed")
    if name and model.files_read:
        try:
            path = Path(model.files_read[0])
            if path.suffix == ".gguf":
                from embscope.formats.gguf import open_gguf

                return canonical(open_gguf(path).type_name(name))
            from embscope.formats.safetensors import read_header

            for f in model.files_read:
                h = read_header(Path(f))
                if name in h:
                    return canonical(h[name]["dtype"])
        except Exception:  # noqa: BLE001 - fall back to the dtype the loader recorded
            pass
    return canonical(model.dtype)


def base_rows(model: "LoadedModel") -> tuple[Rows, Rows | None]:
    """BASE's (embedding, head) as row sources; the head is None when tied."""
    embed = Dense(model.embed, matrix_format(model, "embed"))
    out = Dense(model.output, matrix_format(model, "output")) if model.output is not None else None
    return embed, out


def load_tuned(spec: str | Path, base: "LoadedModel", *, device: str = "cpu", trust_pickle: bool = False,
               download: str = "ranges") -> Tuned:
    """Read TUNED (see the module docstring)."""
    from embscope.changes.peft import is_adapter
    from embscope.models.load import load_model

    if is_adapter(spec):
        return _adapter(Path(spec).expanduser(), base, trust_pickle=trust_pickle)
    m = load_model(str(spec), device=device, trust_pickle=trust_pickle, tokens_past_rows=True, download=download)
    embed = Dense(m.embed, matrix_format(m, "embed"))
    out = Dense(m.output, matrix_format(m, "output")) if m.output is not None else None
    return Tuned(spec=str(spec), kind="model", embed=embed, output=out, model=m, adapter=None, files=list(m.files_read))


def _adapter(folder: Path, base: "LoadedModel", *, trust_pickle: bool) -> Tuned:
    import torch

    from embscope.changes.peft import apply_adapter, read_adapter
    from embscope.tokenizer.load import load_folder_vocabulary

    adapter = read_adapter(folder, trust_pickle=trust_pickle, shape=(base.n_rows, base.dim))
    b_embed, b_out = base_rows(base)
    embed, out = apply_adapter(adapter, b_embed, b_out, tied=base.output is None, where=folder.name)
    vocab, files_from = base.vocab, base.path  # special ids and the template: from where the tokenizer is
    if any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "vocab.json")):
        vocab, files_from = load_folder_vocabulary(folder, name=folder.name) or vocab, str(folder)
    shape = lambda n: torch.empty((n, base.dim), device="meta")  # noqa: E731 - rows count only
    view = dataclasses.replace(
        base, spec=str(folder), name=folder.name, source="peft", path=files_from, embed=shape(embed.n),
        output=shape(out.n) if out is not None else None, tied=out is None, vocab=vocab,
        files_read=list(adapter.files))
    return Tuned(spec=str(folder), kind="peft", embed=embed, output=out, model=view,
                 adapter=adapter.describe(), files=list(adapter.files))
