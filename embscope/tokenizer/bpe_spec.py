"""A BPE tokenizer's JSON spec, parsed once per process, and the extended spec written back by
appending to the text of its vocabulary and merges.

Extending Gemma-3's tokenizer (262,144 pieces) spent most of its time in JSON: measured on a
loaded 2-core machine, of 18 s per extension, 4-6.5 s parsing ``to_str()``, 1.1 s making the set
of its merges and 3.1 s dumping the whole spec again, though only the new entries differ. Here the
parsed spec, its merge pairs and the dumped text of its vocabulary and merges are kept for the last
:data:`KEEP` tokenizers (keyed by their ``to_str()``, so a tokenizer changed in place is parsed
anew); the extended spec is that text with the new entries appended, the same JSON
``json.dumps`` writes for the merged dictionaries. (``Tokenizer.from_str`` of the result, ~6 s
there, remains.)
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

#: tokenizers kept (one model's tokenizer is extended again and again in one process)
KEEP = 2
#: a string no tokenizer spec holds, in place of the vocabulary and merges while the rest is dumped
_HOLE = "\x00embscope-{}\x00"


@dataclass
class BpeSpec:
    """One BPE tokenizer's parsed spec (never changed: extensions build new dictionaries)."""

    #: the whole ``to_str()`` JSON, parsed
    spec: dict
    #: its merges as pairs
    pairs: frozenset
    #: ``json.dumps`` of ``spec["model"]["vocab"]`` and of its merges, made on first use
    _text: dict[str, str] = field(default_factory=dict)

    @property
    def merges_as_lists(self) -> bool:
        merges = self.spec["model"]["merges"]
        return not merges or isinstance(merges[0], list)

    def text(self, key: str) -> str:
        if key not in self._text:
            self._text[key] = json.dumps(self.spec["model"][key], ensure_ascii=False)
        return self._text[key]


_CACHE: "OrderedDict[str, BpeSpec]" = OrderedDict()


def bpe_spec(text: str) -> BpeSpec:
    """The :class:`BpeSpec` of a BPE tokenizer's ``to_str()`` ``text`` (kept for the next call)."""
    found = _CACHE.get(text)
    if found is not None:
        _CACHE.move_to_end(text)
        return found
    spec = json.loads(text)
    merges = spec["model"]["merges"]
    as_lists = not merges or isinstance(merges[0], list)
    found = BpeSpec(spec, frozenset(tuple(m) if as_lists else tuple(m.split(" ", 1)) for m in merges))
    _CACHE[text] = found
    while len(_CACHE) > KEEP:
        _CACHE.popitem(last=False)
    return found


def extended_json(base: BpeSpec, new_vocab: dict[str, int], new_merges: Sequence[tuple[str, str]]) -> str:
    """The spec of ``base`` with ``new_vocab`` after its vocabulary and ``new_merges`` after its
    merges, as JSON: what ``json.dumps`` writes for ``{**spec, "model": {**model, "vocab": {**vocab,
    **new_vocab}, "merges": merges + new_merges}}``, its unchanged parts dumped once per tokenizer.

    >>> # vocab {"a": 0, "b": 1} + {"ab": 2} -> '{"a": 0, "b": 1, "ab": 2}'; merges [] + [("a", "b")] -> '[["a", "b"]]'
    """
    spec, model = base.spec, base.spec["model"]
    merges = [list(p) if base.merges_as_lists else " ".join(p) for p in new_merges]
    holes = {key: json.dumps(_HOLE.format(key)) for key in ("vocab", "merges")}
    frame = json.dumps({**spec, "model": {**model, **{k: _HOLE.format(k) for k in holes}}}, ensure_ascii=False)
    if any(k in model["vocab"] for k in new_vocab) or any(frame.count(h) != 1 for h in holes.values()):
        # a key replaced in place (or a spec that holds the marker): dump the merged dictionaries
        return json.dumps({**spec, "model": {**model, "vocab": {**model["vocab"], **new_vocab},
                                             "merges": list(model["merges"]) + merges}}, ensure_ascii=False)
    parts = {holes["vocab"]: _appended(base.text("vocab"), json.dumps(new_vocab, ensure_ascii=False)),
             holes["merges"]: _appended(base.text("merges"), json.dumps(merges, ensure_ascii=False))}
    return re.sub("|".join(map(re.escape, parts)), lambda m: parts[m.group()], frame)  # one pass: no re-scan


def _appended(old: str, new: str) -> str:
    """A JSON object or array ``old`` with the members of ``new`` (the same kind) after its own.

    >>> _appended('{"a": 0}', '{"b": 1}'), _appended('[]', '[1]'), _appended('[1]', '[]')
    ('{"a": 0, "b": 1}', '[1]', '[1]')
    """
    if len(new) == 2:  # {} or []
        return old
    if len(old) == 2:
        return new
    return old[:-1] + ", " + new[1:]
