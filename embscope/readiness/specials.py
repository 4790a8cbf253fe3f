"""The special ids a trainer uses (BOS, EOS, PAD, UNK), from every file that declares them.

They often disagree, so each source is read and reported on its own:

- ``config.json`` and ``generation_config.json``: ``bos_token_id``, ``eos_token_id`` (an int or a
  list), ``pad_token_id``;
- ``tokenizer_config.json`` and ``special_tokens_map.json``: ``bos_token``, ``eos_token``,
  ``pad_token``, ``unk_token`` as strings (or ``{"content": …}``), mapped to ids by the tokenizer;
- GGUF metadata: ``tokenizer.ggml.bos_token_id``, ``eos_token_id``, ``padding_token_id``,
  ``unknown_token_id``.

What the tokenizer adds when a trainer calls it with special tokens (``tokenizer(text)``): the ids
before and after the text of a probe, from the ``tokenizer.json`` post-processor, unless
``tokenizer_config.json`` says ``add_bos_token``/``add_eos_token`` (transformers honours those) or
the GGUF metadata ``tokenizer.ggml.add_bos_token``/``add_eos_token`` (a GGUF tokenizer has no
post-processor).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.readiness.record import SpecialIds  # noqa: F401 - read here, recorded there

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel

ROLES = ("bos", "eos", "pad", "unk")
#: the sources whose ids the tokenizer itself uses, first first
TOKENIZER_FIRST = ("tokenizer_config.json", "special_tokens_map.json", "gguf", "config.json", "generation_config.json")


def _as_ids(v) -> list[int]:
    if isinstance(v, bool):
        return []
    if isinstance(v, int):
        return [v]
    if isinstance(v, list):
        return [i for i in v if isinstance(i, int) and not isinstance(i, bool)]
    return []


def token_id(model: "LoadedModel", text: str) -> int | None:
    """The id of token ``text`` in the model's tokenizer, or None."""
    vocab = model.vocab
    if vocab is None:
        return None
    tok = getattr(vocab, "tok", None)
    if tok is not None and hasattr(tok, "token_to_id"):
        i = tok.token_to_id(text)
        return int(i) if i is not None else None
    for i in sorted(vocab.special_ids):
        if vocab.display(i) == text:
            return i
    return None


def _read(path: Path) -> dict | None:
    from embscope.errors import EmbscopeError
    from embscope.formats.files import read_json

    if not path.is_file():
        return None
    try:
        data = read_json(path, what="model file")
    except EmbscopeError:
        return None
    return data if isinstance(data, dict) else None


def special_ids(model: "LoadedModel") -> SpecialIds:
    """The :class:`SpecialIds` of ``model`` (see the module docstring)."""
    out = SpecialIds()
    path = Path(model.path)
    flags: dict[str, Any] = {}
    if path.suffix == ".gguf":
        from embscope.formats.gguf import open_gguf

        fields = open_gguf(path, tensors=False).fields
        keys = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id"}
        src = {r: _as_ids(fields.get(f"tokenizer.ggml.{k}")) for r, k in keys.items()}
        out.sources["gguf"] = {r: v for r, v in src.items() if v}
        for k in ("add_bos_token", "add_eos_token"):
            if isinstance(fields.get(f"tokenizer.ggml.{k}"), bool):
                flags[k] = (fields[f"tokenizer.ggml.{k}"], f"gguf {k}")
    elif path.is_dir():
        for fname in ("config.json", "generation_config.json"):
            data = _read(path / fname)
            if data is not None:
                src = {r: _as_ids(data.get(f"{r}_token_id")) for r in ROLES}
                out.sources[fname] = {r: v for r, v in src.items() if v}
        for fname in ("tokenizer_config.json", "special_tokens_map.json"):
            data = _read(path / fname)
            if data is None:
                continue
            src = {}
            for r in ROLES:
                v = data.get(f"{r}_token")
                v = v.get("content") if isinstance(v, dict) else v
                i = token_id(model, v) if isinstance(v, str) else None
                if i is not None:
                    src[r] = [i]
            out.sources[fname] = src
            if fname == "tokenizer_config.json":
                for k in ("add_bos_token", "add_eos_token"):
                    if isinstance(data.get(k), bool):
                        flags[k] = (data[k], f"tokenizer_config.json {k}")
    _adds(model, out, flags)
    return out


def _adds(model: "LoadedModel", out: SpecialIds, flags: dict[str, Any]) -> None:
    """Fill prefix/suffix, added tokens and the base size from the tokenizer itself."""
    import json

    tok = getattr(model.vocab, "tok", None)
    if tok is not None:
        try:
            if callable(getattr(model.vocab, "added_tokens", None)):  # read when the tokenizer was loaded
                out.added = model.vocab.added_tokens()
            else:
                spec = json.loads(tok.to_str())
                out.added = [(a["id"], a["content"], bool(a.get("special"))) for a in spec.get("added_tokens") or []]
            out.base_size = tok.get_vocab_size(with_added_tokens=False)
            probe = "a"
            plain = tok.encode(probe, add_special_tokens=False).ids
            full = tok.encode(probe, add_special_tokens=True).ids
            if plain and full != plain:
                at = next((k for k in range(len(full)) if full[k:k + len(plain)] == plain), None)
                if at is not None:
                    out.prefix, out.suffix = full[:at], full[at + len(plain):]
                    out.adds_from = "tokenizer.json post-processor"
        except Exception:  # noqa: BLE001 - a tokenizer without a probe-able post-processor adds nothing
            pass
    for key, role, where in (("add_bos_token", "bos", "prefix"), ("add_eos_token", "eos", "suffix")):
        if key not in flags:
            continue
        on, src = flags[key]
        ids = [i for name in TOKENIZER_FIRST if name in out.sources for i in out.sources[name].get(role, ())][:1]
        setattr(out, where, ids if on else [])
        out.adds_from = src if out.adds_from == "none" else f"{out.adds_from}, {src}"
