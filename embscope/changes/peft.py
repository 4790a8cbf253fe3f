"""A PEFT adapter folder read as the embedding and head it gives its base — without merging (and
without loading) the whole model.

``save_pretrained`` of a PEFT model writes ``adapter_config.json`` and ``adapter_model.safetensors``
with the adapter name dropped from the keys (``peft/utils/save_and_load.py``,
``get_peft_model_state_dict``). What reaches the embedding (``…embed_tokens``) or the head
(``…lm_head``), keyed under ``base_model.model.``:

=================================================  ==================================================
key                                                what the merged matrix is
=================================================  ==================================================
``<m>.weight``                                     ``modules_to_save`` (or a resized matrix saved by
                                                   ``save_embedding_layers``): the whole matrix
``<m>.base_layer.weight``                          the targeted layer's own matrix, saved beside its
                                                   LoRA factors; used when its rows differ from BASE's
``<m>.lora_embedding_A`` (r, V), ``_B`` (d, r)     LoRA on the embedding: ``W + (B A)ᵀ · s``
``<m>.lora_A.weight`` (r, d), ``lora_B`` (V, r)    LoRA on the head: ``W + B A · s``
``<m>[.token_adapter].trainable_tokens_delta``     ``trainable_token_indices`` / ``TRAINABLE_TOKENS``:
                                                   the rows at those ids *replaced* by these values
=================================================  ==================================================

``s = lora_alpha / r`` (``lora_alpha / √r`` with ``use_rslora``; ``alpha_pattern`` per module;
``peft/tuners/lora/layer.py``); ``r`` is read from the factors' shape. On a tied base, what
``merge_and_unload`` gives: a ``modules_to_save`` copy of the embedding leaves the head on the old
rows (the tie is broken) unless ``ensure_weight_tying`` or the head is saved too; LoRA and trainable
tokens on the embedding reach the head through the shared weight. DoRA on the embedding and other
PEFT types that change it are refused with the fix (merge first).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from embscope.changes.record import AdapterInfo
from embscope.changes.rows import Dense, Patched, Rows
from embscope.errors import ModelFileError, PickleRefused, SpecError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: the prefix PEFT's LoRA-family models put before the base model's own names
PREFIX = "base_model.model."
#: PEFT types whose only possible effect on the embedding is through modules_to_save / trainable tokens
_AUX_ONLY = {"LORA", "TRAINABLE_TOKENS"}


def is_adapter(path: str | Path) -> bool:
    """Whether ``path`` is a PEFT adapter folder (it holds ``adapter_config.json``)."""
    p = Path(path).expanduser()
    return p.is_dir() and (p / ADAPTER_CONFIG).is_file()


@dataclass
class Part:
    """What an adapter does to one matrix (the embedding or the head)."""

    #: module name in the base model (``model.embed_tokens``)
    module: str
    #: the whole matrix (modules_to_save / a saved resized layer)
    full: Any = None
    #: True when ``full`` is a modules_to_save copy (on a tied base it leaves the head behind)
    full_is_copy: bool = False
    #: LoRA delta as factors ((n, r), (r, d)), scaling folded into the first
    lowrank: Any = None
    rank: int | None = None
    scaling: float | None = None
    #: trainable tokens: ids and their (k, d) values
    ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    values: Any = None
    #: dtypes of the tensors that replace rows
    dtypes: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        out = []
        if self.full is not None:
            out.append(("modules_to_save" if self.full_is_copy else "saved layer") + f" ({tuple(self.full.shape)[0]} rows)")
        if self.lowrank is not None:
            out.append(f"LoRA r={self.rank}, scaling {self.scaling:g}")
        if len(self.ids):
            out.append(f"trainable tokens ({len(self.ids)} ids)")
        return out


@dataclass
class Adapter:
    """A PEFT adapter folder, read."""

    path: Path
    config: dict[str, Any]
    #: ``embed`` / ``output`` → the part that touches that matrix
    parts: dict[str, Part]
    files: list[str]

    @property
    def peft_type(self) -> str:
        return str(self.config.get("peft_type") or "?")

    def describe(self) -> AdapterInfo:
        """What the adapter is and does to each matrix, for the record."""
        base = self.config.get("base_model_name_or_path")
        return AdapterInfo(peft_type=self.peft_type, base_model=base if isinstance(base, str) else None,
                           embed=self.parts["embed"].describe() if "embed" in self.parts else [],
                           output=self.parts["output"].describe() if "output" in self.parts else [],
                           ensure_weight_tying=bool(self.config.get("ensure_weight_tying")))


def _role(module: str) -> str | None:
    """``embed`` / ``output`` / None for a base-model module name."""
    from embscope.models.names import EMBED_PATTERNS, OUTPUT_PATTERNS

    name = f"{module}.weight"
    if any(re.search(p, name) for p in EMBED_PATTERNS):
        return "embed"
    if any(re.search(p, name) for p in OUTPUT_PATTERNS):
        return "output"
    return None


#: the tensor names PEFT saves on an embedding or head module, longest first
SUFFIXES = ("token_adapter.trainable_tokens_delta", "trainable_tokens_delta", "base_layer.weight", "lora_embedding_A",
            "lora_embedding_B", "lora_A.weight", "lora_B.weight", "weight")


def _split(name: str) -> tuple[str | None, str]:
    """``(module, tensor)`` for a key on the embedding or the head, ``(None, "")`` for any other module:
    ``model.embed_tokens.lora_embedding_A`` → ``("model.embed_tokens", "lora_embedding_A")``."""
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):  # the longest prefix that is the embedding or the head
        module = ".".join(parts[:k])
        if _role(module) is not None:
            return module, ".".join(parts[k:])
    return None, ""


def _match(patterns, module: str):
    """The value of the first key of ``patterns`` that names ``module`` (PEFT's ``get_pattern_key``
    rule: ``(.*\\.)?KEY$``), else None."""
    for key, v in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", module):
            return v
    return None


def _token_ids(cfg: dict, module: str, role: str) -> list[int]:
    tti = cfg.get("trainable_token_indices")
    if cfg.get("peft_type") == "TRAINABLE_TOKENS":
        tti = cfg.get("token_indices")
    if isinstance(tti, list):
        return tti if (role == "embed" or cfg.get("peft_type") == "TRAINABLE_TOKENS") else []
    if isinstance(tti, dict):
        found = _match(tti, module)
        return found if isinstance(found, list) else []
    return []


def _adapter_tensors(folder: Path, trust_pickle: bool):
    """``({key: () -> tensor}, {key: dtype name}, {key: shape})`` of the adapter's weights file: the
    safetensors file read lazily (shapes from its header), or ``adapter_model.bin`` (with
    ``trust_pickle`` only, and ``weights_only``)."""
    import torch

    from embscope.formats.safetensors import read_header, read_tensor

    weights = folder / ADAPTER_WEIGHTS
    if weights.is_file():
        header = read_header(weights)
        return ({k: (lambda k=k: read_tensor(weights, k, header)) for k in header},
                {k: v["dtype"] for k, v in header.items()}, {k: tuple(v["shape"]) for k, v in header.items()})
    if not (folder / "adapter_model.bin").is_file():
        raise ModelFileError(f"{folder} has {ADAPTER_CONFIG} but no {ADAPTER_WEIGHTS}; re-save the adapter "
                             "(model.save_pretrained)")
    if not trust_pickle:
        raise PickleRefused(folder)
    try:
        state = torch.load(folder / "adapter_model.bin", map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a pickle refused by weights_only
        raise ModelFileError(f"refused to load adapter_model.bin: {str(exc).splitlines()[0]}; save the adapter "
                             "with safe_serialization=True") from None
    state = {k: v for k, v in state.items() if hasattr(v, "shape")}
    return ({k: (lambda v=v: v) for k, v in state.items()},
            {k: str(v.dtype).replace("torch.", "") for k, v in state.items()}, {k: tuple(v.shape) for k, v in state.items()})


#: the largest token id a config may name (int64, what torch indexes with)
MAX_ID = 2**63 - 1


def _bad(folder: Path, field: str, allowed: str, got: Any) -> ModelFileError:
    text = repr(got)
    text = text if len(text) <= 40 else text[:37] + "..."
    return ModelFileError(f"{folder.name}/{ADAPTER_CONFIG}: {field} must be {allowed}, got {text}; re-save the "
                          "adapter with PEFT (model.save_pretrained)")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ids(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_ID for i in v)


def _patterns(folder: Path, field: str, v: Any, ok, allowed: str) -> None:
    """A ``{regex: value}`` config field: a JSON object whose keys compile and whose values pass ``ok``."""
    if not isinstance(v, dict):
        raise _bad(folder, field, f"an object of {{module pattern: {allowed}}}", v)
    for key, value in v.items():
        try:
            re.compile(rf"(.*\.)?({key})$")
        except re.error as exc:
            raise ModelFileError(f"{folder.name}/{ADAPTER_CONFIG}: {field} key {key[:40]!r} is not a regular "
                                 f"expression ({exc.msg}); re-save the adapter with PEFT (model.save_pretrained)") from None
        if not ok(value):
            raise _bad(folder, f"{field}[{key!r}]", allowed, value)


def check_config(cfg: dict, folder: Path) -> None:
    """Every field the reader uses has the type PEFT writes (``peft/tuners/lora/config.py``):
    ``lora_alpha`` a number, ``use_rslora`` a boolean, ``alpha_pattern`` / ``rank_pattern``
    ``{regex: number}``, ``trainable_token_indices`` a list of ids or ``{regex: [ids]}``,
    ``token_indices`` a list of ids; ids are whole numbers in [0, 2⁶³) (never booleans). Anything
    else is one line naming the field and what is allowed."""
    if "lora_alpha" in cfg and cfg["lora_alpha"] is not None and not _number(cfg["lora_alpha"]):
        raise _bad(folder, "lora_alpha", "a number", cfg["lora_alpha"])
    if cfg.get("use_rslora") is not None and not isinstance(cfg["use_rslora"], bool):
        raise _bad(folder, "use_rslora", "true or false", cfg["use_rslora"])
    for name in ("alpha_pattern", "rank_pattern"):
        if cfg.get(name) not in (None, {}):
            _patterns(folder, name, cfg[name], _number, "a number")
    tti = cfg.get("trainable_token_indices")
    if isinstance(tti, dict):
        _patterns(folder, "trainable_token_indices", tti, _ids, "a list of token ids (whole numbers ≥ 0)")
    elif tti is not None and not _ids(tti):
        raise _bad(folder, "trainable_token_indices", "a list of token ids (whole numbers ≥ 0) or {module pattern: "
                   "[ids]}", tti)
    if cfg.get("token_indices") is not None and not _ids(cfg["token_indices"]):
        raise _bad(folder, "token_indices", "a list of token ids (whole numbers ≥ 0)", cfg["token_indices"])


def _check_shapes(folder: Path, module: str, got: dict[str, str], shapes: dict, shape: tuple[int, int] | None) -> None:
    """The tensors of one module, from their declared shapes alone (nothing is read yet): 2-D,
    LoRA factors of one rank between 1 and the rows' width that fit each other and the matrix,
    trainable-token rows and saved matrices as wide as the base's rows; a saved matrix at most
    twice the base's rows plus 65,536 (a resize for new tokens, not a file that would fill memory)."""
    where = f"{folder.name}: {module}"
    dims = {what: shapes[key] for what, key in got.items()}
    for what, dim in dims.items():
        if len(dim) != 2:
            raise ModelFileError(f"{where}.{what} has shape {list(dim)}, not a matrix; re-save the adapter")
    n, d = shape if shape is not None else (None, None)
    for a_key, b_key, r_of, width_of in (("lora_embedding_A", "lora_embedding_B", lambda a, b: (a[0], b[1]),
                                          lambda a, b: (a[1], b[0])),
                                         ("lora_A.weight", "lora_B.weight", lambda a, b: (a[0], b[1]),
                                          lambda a, b: (b[0], a[1]))):
        if a_key in dims and b_key in dims:
            ra, rb = r_of(dims[a_key], dims[b_key])
            rows, width = width_of(dims[a_key], dims[b_key])
            if ra != rb or ra < 1:
                raise ModelFileError(f"{where}: LoRA factors of shapes {list(dims[a_key])} and {list(dims[b_key])} "
                                     "have no common rank ≥ 1; re-save the adapter")
            if d is not None and (width != d or ra > d):
                raise ModelFileError(f"{where}: LoRA of rank {ra} on rows {width} wide, but the base's rows are {d} "
                                     f"wide (a rank above the width never helps); pass the base the adapter was "
                                     "trained on")
            if n is not None and rows > 2 * n + 65536:
                raise ModelFileError(f"{where}: LoRA over {rows} rows, the base has {n}: not a resize of it; pass the "
                                     "base the adapter was trained on")
    for what in ("weight", "base_layer.weight", "token_adapter.trainable_tokens_delta", "trainable_tokens_delta"):
        if what in dims and d is not None and dims[what][1] != d:
            raise ModelFileError(f"{where}.{what} is {list(dims[what])}, but the base's rows are {d} wide; pass the "
                                 "base the adapter was trained on")
        if what in ("weight", "base_layer.weight") and what in dims and n is not None and dims[what][0] > 2 * n + 65536:
            raise ModelFileError(f"{where}.{what} has {dims[what][0]} rows, the base {n}: not a resize of it; pass the "
                                 "base the adapter was trained on")


def read_adapter(folder: str | Path, *, trust_pickle: bool = False, shape: tuple[int, int] | None = None) -> Adapter:
    """Read ``adapter_config.json`` and the tensors of ``adapter_model.safetensors`` that touch the
    embedding or the head (see the module docstring); one-line errors for what cannot be read.
    ``shape``: BASE's ``(rows, width)``: every tensor's declared shape is checked against it before
    any tensor is read (:func:`check_config`, :func:`_check_shapes`)."""
    from embscope.formats.files import read_json

    folder = Path(folder).expanduser()
    cfg = read_json(folder / ADAPTER_CONFIG, what="adapter config")
    if not isinstance(cfg, dict):
        raise ModelFileError(f"{folder / ADAPTER_CONFIG} is not a JSON object; re-save the adapter")
    check_config(cfg, folder)
    weights = folder / ADAPTER_WEIGHTS
    tensors, dtypes, shapes = _adapter_tensors(folder, trust_pickle)
    ptype = str(cfg.get("peft_type") or "")
    parts: dict[str, Part] = {}
    pending: dict[tuple[str, str], dict[str, Any]] = {}
    for key in tensors:
        name = key[len(PREFIX):] if key.startswith(PREFIX) else key
        module, what = _split(name)
        if module is None:
            continue
        role = _role(module)
        if what.startswith("lora_magnitude_vector"):
            raise SpecError(f"{folder.name} uses DoRA on {module}, which embscope does not read; merge it "
                            "(model.merge_and_unload().save_pretrained(DIR)) and diff DIR")
        if what not in SUFFIXES or (ptype not in _AUX_ONLY and what not in ("weight", "base_layer.weight")):
            raise SpecError(f"{folder.name} changes {module} with {ptype or 'an unknown PEFT type'} ({what}), which "
                            "embscope does not read; merge it (model.merge_and_unload().save_pretrained(DIR)) "
                            "and diff DIR")
        pending.setdefault((role, module), {})[what] = key
    for (role, module), got in pending.items():
        _check_shapes(folder, module, got, shapes, shape)
        tk = got.get("token_adapter.trainable_tokens_delta") or got.get("trainable_tokens_delta")
        if tk and shapes[tk][0] != len(_token_ids(cfg, module, role)):
            raise ModelFileError(f"{folder.name}: {shapes[tk][0]} trainable-token rows for {module} but "
                                 f"{len(_token_ids(cfg, module, role))} ids in {ADAPTER_CONFIG}; re-save the adapter")
    for (role, module), got in pending.items():
        if role in parts:
            raise SpecError(f"{folder.name} changes two {role} modules ({parts[role].module}, {module}); "
                            "merge it and diff the merged model")
        p = Part(module=module)
        full_key = got.get("weight") or got.get("base_layer.weight")
        if full_key:
            p.full = tensors[full_key]()
            p.full_is_copy = "weight" in got and "lora_embedding_A" not in got and "lora_A.weight" not in got
            p.dtypes.append(dtypes[full_key])
        a_key, b_key = ("lora_embedding_A", "lora_embedding_B") if "lora_embedding_A" in got else ("lora_A.weight", "lora_B.weight")
        if a_key in got or b_key in got:
            if not (a_key in got and b_key in got):
                raise ModelFileError(f"{folder.name}: {module} has one LoRA factor of two; re-save the adapter")
            A, B = tensors[got[a_key]]().float(), tensors[got[b_key]]().float()
            r = int(A.shape[0])
            alpha = _match(cfg.get("alpha_pattern"), module)
            alpha = float(alpha if alpha is not None else cfg.get("lora_alpha", r))
            s = alpha / math.sqrt(r) if cfg.get("use_rslora") else alpha / r
            if a_key == "lora_embedding_A":  # A (r, V), B (d, r): delta rows = Aᵀ Bᵀ · s
                p.lowrank = (A.T.contiguous() * s, B.T.contiguous())
            else:  # A (r, d), B (V, r): delta = B A · s
                p.lowrank = (B * s, A)
            if p.lowrank[0].shape[1] != p.lowrank[1].shape[0]:
                raise ModelFileError(f"{folder.name}: the LoRA factors of {module} do not fit together; re-save the adapter")
            p.rank, p.scaling = r, s
        tk = got.get("token_adapter.trainable_tokens_delta") or got.get("trainable_tokens_delta")
        if tk:
            values = tensors[tk]()
            ids = _token_ids(cfg, module, role)
            if not ids or len(ids) != values.shape[0]:
                raise ModelFileError(f"{folder.name}: {values.shape[0]} trainable-token rows for {module} but "
                                     f"{len(ids)} ids in {ADAPTER_CONFIG}; re-save the adapter")
            p.ids, p.values = np.asarray(ids, dtype=np.int64), values
            p.dtypes.append(dtypes[tk])
        parts[role] = p
    files = [str(weights if weights.is_file() else folder / "adapter_model.bin"), str(folder / ADAPTER_CONFIG)]
    return Adapter(path=folder, config=cfg, parts=parts, files=files)


def _apply(part: Part | None, start: Rows, fmt: str, base_rows: int, where: str) -> Rows:
    """``start`` with ``part``'s changes (see :class:`~embscope.changes.rows.Patched`)."""
    from embscope.changes.noise import canonical

    if part is None:
        return start
    matrix = start
    if part.full is not None:
        if tuple(part.full.shape[1:]) != (start.d,):
            raise ModelFileError(f"the adapter's {part.module} is {tuple(part.full.shape)} but the base's rows are "
                                 f"{start.d} wide; pass the base the adapter was trained on")
        # a copy of BASE's rows (same shape) that LoRA factors sit on is BASE itself: reading BASE keeps
        # the unchanged rows exact; a modules_to_save copy or a resized matrix is read from the adapter
        if part.full_is_copy or part.full.shape[0] != base_rows:
            matrix = Dense(part.full, canonical(part.dtypes[0]))
    n = matrix.n
    if part.lowrank is not None and part.lowrank[0].shape[0] != n:
        raise ModelFileError(f"the adapter's LoRA on {part.module} covers {part.lowrank[0].shape[0]} rows but the "
                             f"matrix has {n}; pass the base the adapter was trained on")
    if len(part.ids) and int(part.ids.max()) >= n:
        raise ModelFileError(f"the adapter trains token {int(part.ids.max())} of {part.module}, past its {n} rows; "
                             "pass the base the adapter was trained on")
    if part.values is not None and part.values.shape[1] != start.d:
        raise ModelFileError(f"the adapter's trainable tokens of {part.module} are {part.values.shape[1]} wide, the "
                             f"base's rows {start.d}; pass the base the adapter was trained on")
    formats = [canonical(d) for d in part.dtypes] or [fmt]
    out_fmt = matrix.format if matrix is not start else max(formats, key=_coarseness)
    if part.lowrank is None and not len(part.ids):
        return matrix
    return Patched(base=matrix, n_rows=n, format=out_fmt, lowrank=part.lowrank, ids=part.ids, values=part.values)


def _coarseness(fmt: str) -> int:
    """Rank of a format by precision, coarsest highest (for the format of a patched matrix)."""
    return {"F64": 0, "F32": 1, "BF16": 3, "F16": 2}.get(fmt, 4)


def apply_adapter(adapter: Adapter, embed: Rows, output: Rows | None, *, tied: bool, where: str) -> tuple[Rows, Rows | None]:
    """The tuned (embedding, head) the adapter gives ``embed``/``output`` (``output`` None and
    ``tied`` for a tied base); the head is None when it stays tied to the embedding (the merge
    semantics of the module docstring)."""
    e, o = adapter.parts.get("embed"), adapter.parts.get("output")
    new_embed = _apply(e, embed, embed.format, embed.n, where)
    if not tied:
        return new_embed, _apply(o, output, output.format, output.n, where)
    if o is not None and o.full is not None:  # the head saved on its own (modules_to_save, ensure_weight_tying)
        return new_embed, _apply(o, embed, embed.format, embed.n, where)
    if e is not None and e.full_is_copy and not adapter.config.get("ensure_weight_tying"):
        return new_embed, embed  # the copy trains alone; the head keeps BASE's rows
    if o is not None:  # LoRA / trainable tokens on a tied head write the shared weight too
        new_embed = _apply(o, new_embed, new_embed.format, new_embed.n, where)
    return new_embed, None
