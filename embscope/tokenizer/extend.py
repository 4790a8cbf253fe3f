"""New tokens in the tokenizer's own terms: merges for BPE, scored pieces for Unigram, vocabulary
entries for WordPiece; HF *added tokens* only when asked for (``form="added"``).

An added token is matched in the raw text before the model runs, anywhere: added as " externa"
(from "otitis externa"), it cuts " external" into " externa" + "l", a split the model never saw.
A new token written into the model itself is built only where the model would build it.

**BPE** (byte-level like GPT-2/SmolLM2/Llama 3, or SentencePiece-style like Llama 2/Gemma).
BPE applies, inside one pre-token, the adjacent pair of lowest merge rank, again and again. A
merge appended after every existing merge can therefore apply only once no existing merge
applies, i.e. on the original tokenization of the pre-token, and it can only join two tokens that
tokenization leaves side by side; a token it makes is new, so no existing merge can use it. Hence
(HF ``tokenizers``' BPE and llama.cpp's both pick the lowest rank, leftmost first):

- every old text tokenizes as before except where new tokens join runs of its old tokens;
- a new token never starts or ends inside an old token, nor crosses a pre-token (word)
  boundary: the pre-tokenizer splits before any merge runs. A term the pre-tokenizer itself cuts
  (GPT-2's, Llama 3's and Qwen2's regexes cut Hindi ``नहीं`` at its vowel sign: ``" नह" + "ीं"``;
  o200k's regex keeps marks in words) can therefore never be written as merges: it is skipped,
  with that reason (:func:`pretoken_count`), and ``--as added`` adds it as one added token
  instead. ``extend`` reports the share of the corpus's words so cut (``words_split_share``).

A term of k pieces needs k − 1 merges: the left chain ``(p1, p2) → p1p2``,
``(p1p2, p3) → p1p2p3``, …; its k − 2 *intermediate* tokens (``" metatars"`` on the way to
``" metatarsal"``) are new tokens too. They are emitted in words that hold their pieces but
not the whole term (``" metatarsus"`` → ``" metatars" + "us"``), so they get rows like the terms (initialised by
the same strategy from their own pieces) and are listed with ``kind = "intermediate"``. Left
chains were chosen over right chains (``"atarsal"`` first) because their intermediates are word
beginnings: on SmolLM2-135M + corpora/medical (200 terms, 74 of 2 pieces, 126 of 3–6), left
chains change 58 of 51,559 held-out words that hold no whole term (4,465 words change in all),
right chains 137; neither changes a word of the UDHR's English text. A term whose chain would
make an *existing* token (often one BPE never emits: Magikarp's unreachable rows, never trained)
is left out, with the reason, and so is a term of more than :data:`MAX_TERM_PIECES` pieces (its
chain would add that many rows less one). After the merges are written every term is encoded again; one that
does not come out as its own token (another term's merge took one of its pairs first) gets
merges joining what it became, after all others, so every term is one token.

Other tools: mergekit's ``tokensurgeon`` keeps the donor's tokenizer as it is (its merges were
trained with it) and mergekit's union tokenizer adds foreign tokens with ``add_tokens``;
NVIDIA's tokenizer-extension recipe splices BPE merges trained on the new text into the base
merge table (its ``add``/``replace`` methods) or registers atomic added tokens (``expand``), and
notes that appended merges can leave rank-dead tokens a base merge shadows
(https://docs.nvidia.com/nemotron/nightly/tokenizer-extension/explanation/extension-methods.html);
continued BPE training (Purason et al. 2025, arXiv 2512.03989) appends learned merges the same
way. Here the merges are not learned but derived from the chosen terms, and every one is checked
to fire: no new token is rank-dead.

**Unigram** (SentencePiece Unigram: T5, XLM-R). Viterbi picks the segmentation with the largest
sum of piece scores. A new piece T whose pieces p_1..p_k (its old best segmentation) score
Σ s(p_i) gets ``s(T) = Σ s(p_i) + (k − 1)·ε``: a segmentation using T scores what the same
segmentation with p_1..p_k in its place scores, plus (k − 1)·ε, so the best segmentation is the
old best with T substituted wherever it held p_1..p_k, unless some other segmentation was within
ε of the best (:data:`UNIGRAM_MARGIN`).

**WordPiece** (BERT). Greedy longest match from the word start: a new word-initial entry is used
in every word it begins, as WordPiece would use it; the rest of such a word is matched again, so
it may be cut anew (6 of 882 new-token occurrences on held-out medical lines with bge's vocabulary).

``tests/test_extension_tokenizer.py`` checks (with :mod:`embscope.tokenizer.tokenization_check`) on UDHR English and held-out medical lines that the
written tokenizer decodes to the text, changes no word except by replacing runs of old tokens with
the new token built from exactly those, and loads in ``tokenizers`` and transformers with the same
ids.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover
    from tokenizers import Tokenizer

#: how new tokens are written: ``model`` (in the tokenizer's model: merges, pieces, entries) or
#: ``added`` (HF added tokens, matched in the raw text before the model)
FORMS = ("model", "added")
#: Unigram: score above the pieces' sum, per piece saved (log-probability units). Small enough
#: that no segmentation within it of the best exists on UDHR English and held-out ICD text
#: (checked by the coarsening test), large enough to be far above float64 rounding of the sums.
UNIGRAM_MARGIN = 1e-6
#: rounds of extra merges for terms another term's merge split differently (one was always enough)
FIX_ROUNDS = 4

_BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
#: SentencePiece's space marker
SPACE = "▁"


@dataclass
class NewToken:
    """One token the extension adds."""

    #: the text it stands for, as candidates name terms (" unspecified"; "▁unspecified" for
    #: SentencePiece-style vocabularies)
    text: str
    #: the string the tokenizer stores ("Ġunspecified" in byte-level BPE)
    piece: str
    #: its id in the extended tokenizer
    id: int
    #: the old ids it replaces: the run of old tokens its merges join (its initialisation reads them)
    pieces: list[int]
    #: ``term`` (a chosen term) or ``intermediate`` (a step of a term's merge chain)
    kind: str = "term"


@dataclass
class TokenizerExtension:
    """An extended tokenizer and what was added to it."""

    #: the extended ``tokenizers.Tokenizer``
    tokenizer: "Tokenizer"
    #: ``merges`` (BPE), ``pieces`` (Unigram), ``vocab`` (WordPiece) or ``added`` (added tokens)
    form: str
    #: every new token, in id order: the terms and (BPE) their chains' intermediate tokens
    tokens: list[NewToken] = field(default_factory=list)
    #: the merges appended (BPE), in rank order
    merges: list[tuple[str, str]] = field(default_factory=list)
    #: terms not added, with the reason
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def terms(self) -> list[NewToken]:
        return [t for t in self.tokens if t.kind == "term"]


def model_type(tok: "Tokenizer") -> str:
    """``BPE``, ``Unigram``, ``WordPiece``, ``WordLevel``: the type of ``tok``'s model."""
    return type(tok.model).__name__


def extend_tokenizer(tok: "Tokenizer", terms: Sequence[str], pieces: Sequence[Sequence[int]], *,
                     form: str = "model") -> TokenizerExtension:
    """``tok`` with ``terms`` (each with its old piece ids) added as ``form`` says (module docstring).

    Args:
        tok: the model's tokenizer (left unchanged).
        terms: the terms, as :mod:`embscope.extension.candidates` names them (one pre-token each;
            multi-word terms only with ``form="added"``).
        pieces: per term, the ids the old tokenizer gives it.
        form: ``model`` or ``added``.

    Example:
        >>> ext = extend_tokenizer(tok, [" unspecified"], [[tok.token_to_id("Ġun"), tok.token_to_id("specified")]])  # doctest: +SKIP
        >>> ext.tokenizer.encode(" unspecified").tokens, ext.merges  # doctest: +SKIP
        (['Ġunspecified'], [('Ġun', 'specified')])
    """
    if form not in FORMS:
        raise SpecError(f"unknown extension form {form!r}; choose from {', '.join(FORMS)}")
    if form == "added":
        return _added(tok, terms, pieces)
    kind = model_type(tok)
    builder = {"BPE": _bpe, "Unigram": _unigram, "WordPiece": _wordpiece}.get(kind)
    if builder is None:
        raise SpecError(f"a {kind} tokenizer has no merges or scored pieces to extend; pass --as added "
                        "to add the terms as added tokens")
    return builder(tok, terms, pieces)


def pretoken_count(tok: "Tokenizer", term: str) -> int:
    """Pre-tokens ``tok``'s pre-tokenizer cuts ``term`` into (1 without a pre-tokenizer). A term
    of more than one can never be a merge: BPE runs inside each pre-token, so its merges would be
    dead; :func:`extend_tokenizer` skips it with that reason (``--as added`` adds it whole).

    >>> # GPT-2's regex on " नहीं": [" नह", "ीं"] -> 2; on " hypertension" -> 1
    """
    if tok.pre_tokenizer is None or metaspace_style(tok)[0]:
        return 1
    text = tok.normalizer.normalize_str(term) if tok.normalizer is not None else term
    return len(tok.pre_tokenizer.pre_tokenize_str(text))


def _spec(tok: "Tokenizer") -> dict:
    return json.loads(tok.to_str())


def _next_id(spec: dict, n_model: int) -> int:
    added = [a["id"] for a in spec.get("added_tokens") or []]
    return max([n_model - 1, *added]) + 1


def _unusable(tok: "Tokenizer", strs: Sequence[str | None], added: set[str]) -> str | None:
    """Why a term with these piece strings cannot become one model token, or None."""
    if any(s is None for s in strs):
        return "one of its pieces has no string in the vocabulary"
    if any(s in added for s in strs):
        return "one of its pieces is an added token, matched before the model"
    if any(_BYTE_PIECE.match(s) for s in strs):
        return "one of its pieces is a byte-fallback piece (<0xNN>), which cannot be joined as text"
    return None


#: a BPE term of k pieces adds up to k − 1 rows (its chain's intermediates and itself); terms of more
#: pieces are skipped, so ``--top N`` adds at most N × 15 rows (a 10 kB "word" would add thousands)
MAX_TERM_PIECES = 16


def _bpe(tok: "Tokenizer", terms, pieces) -> TokenizerExtension:
    from embscope.tokenizer.bpe_spec import bpe_spec

    base = bpe_spec(tok.to_str())  # parsed once per tokenizer: this one is read, never changed
    spec = base.spec
    model = spec["model"]
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        raise SpecError("this BPE marks word continuations or ends in its pieces (continuing_subword_prefix / "
                        "end_of_word_suffix); pass --as added to add the terms as added tokens")
    chains = _Chains(vocab=model["vocab"], added={a["content"] for a in spec.get("added_tokens") or []},
                     pairs=set(base.pairs),
                     next_id=_next_id(spec, len(model["vocab"])),
                     byte_level='"ByteLevel"' in json.dumps([spec.get("pre_tokenizer"), spec.get("decoder")]))
    skipped: dict[str, str] = {}
    word_of: dict[str, str] = {}  # term → its pre-token (the pieces' concatenation)
    for term, ids in zip(terms, pieces):
        cut = pretoken_count(tok, term)
        if cut > 1:
            skipped[term] = (f"the pre-tokenizer cuts it into {cut} pre-tokens and no merge joins two pre-tokens; "
                             "add it with --as added")
            continue
        if len(ids) > MAX_TERM_PIECES:
            skipped[term] = (f"it takes {len(ids)} pieces: its merge chain would add up to {len(ids) - 1} rows "
                             f"(at most {MAX_TERM_PIECES - 1} per term)")
            continue
        strs = [tok.id_to_token(int(i)) for i in ids]
        why = chains.why_not(tok, strs) if len(ids) >= 2 else "it is already one token"
        if why is not None:
            skipped[term] = why
            continue
        word_of[term] = "".join(strs)
        chains.chain(strs, ids, term)
    ext = _form_every_term(tok, base, word_of, chains)
    return TokenizerExtension(ext, "merges", sorted(chains.new.values(), key=lambda t: t.id), chains.appended,
                              skipped)


@dataclass
class _Chains:
    """The merges and new tokens a BPE extension builds, term by term: each term is a left chain
    of merges over its old pieces, each join a new token (intermediate, or the term itself)."""

    #: the tokenizer's vocabulary and added tokens
    vocab: dict[str, int]
    added: set[str]
    #: merges known so far (the model's and the appended ones)
    pairs: set[tuple[str, str]]
    #: the id the next new token gets
    next_id: int
    #: pieces are byte-level strings (GPT-2's byte-to-unicode map)
    byte_level: bool
    #: piece → the new token it is
    new: dict[str, NewToken] = field(default_factory=dict)
    #: merges appended to the model, in order
    appended: list[tuple[str, str]] = field(default_factory=list)

    def text_of(self, piece: str) -> str:
        if self.byte_level:
            from embscope.tokenizer.backends import unicode_to_bytes

            table = unicode_to_bytes()
            if all(c in table for c in piece):
                return bytes(table[c] for c in piece).decode("utf-8", errors="replace")
        return piece

    def why_not(self, tok: "Tokenizer", strs: Sequence[str]) -> str | None:
        """Why a term of pieces ``strs`` cannot be merged in (None: it can)."""
        why = _unusable(tok, strs, self.added)
        if why is None:
            prefixes = ["".join(strs[:j]) for j in range(2, len(strs) + 1)]
            clash = next((p for p in prefixes if p in self.vocab or p in self.added), None)
            if clash is not None:
                why = (f"its merges would make the existing token {clash!r} (id {self.vocab.get(clash)}) reachable; "
                       "its row is the model's, not a new one")
        return why

    def chain(self, strs: Sequence[str], ids: Sequence[int], final_text: str | None) -> None:
        """Left-chain merges joining ``strs`` (the last join is the term when ``final_text``)."""
        left = strs[0]
        for j in range(1, len(strs)):
            out = left + strs[j]
            last = j == len(strs) - 1
            if out not in self.new:
                self.new[out] = NewToken(text=final_text if last and final_text else self.text_of(out), piece=out,
                                         id=self.next_id, pieces=list(ids[:j + 1]), kind="intermediate")
                self.next_id += 1
            if last and final_text is not None:
                self.new[out].kind = "term"
                self.new[out].text = final_text
            if (left, strs[j]) not in self.pairs:
                self.pairs.add((left, strs[j]))
                self.appended.append((left, strs[j]))
            left = out


def _form_every_term(tok: "Tokenizer", base, word_of: dict[str, str], chains: _Chains) -> "Tokenizer":
    """The extended tokenizer, with merges added until every term comes out as one token (a term
    that an earlier merge splits otherwise is joined from what it became, after every other merge).
    ``base``: the tokenizer's :class:`~embscope.tokenizer.bpe_spec.BpeSpec`."""
    from tokenizers import Tokenizer

    from embscope.tokenizer.bpe_spec import extended_json

    def build() -> "Tokenizer":
        # the old vocabulary's and merges' JSON with the new ones appended (bpe_spec: Gemma-3's
        # 262,144-piece spec is dumped once per process, not once per extension)
        return Tokenizer.from_str(extended_json(base, {t.piece: t.id for t in chains.new.values()}, chains.appended))

    ext = build()
    for _ in range(FIX_ROUNDS):
        wrong = []
        for term, word in word_of.items():
            got = [t.value for t in ext.model.tokenize(word)]
            if got != [word]:
                wrong.append((term, word, got))
        if not wrong:
            break
        for term, word, got in wrong:  # join what the term became, after every other merge
            ids = [int(i) for i in _old_ids(tok, got, chains.new)]
            chains.chain(got, ids, term)
        ext = build()
    else:  # pragma: no cover - never seen: every term formed after one round
        raise SpecError(f"{len(wrong)} terms do not come out as one token after {FIX_ROUNDS} rounds of merges "
                        f"(e.g. {wrong[0][0]!r}); pass --as added")
    return ext


def _old_ids(tok: "Tokenizer", strs: Sequence[str], new: dict[str, NewToken]) -> list[int]:
    """Old ids behind a run of (old or new) piece strings: a new piece stands for its own pieces."""
    out: list[int] = []
    for s in strs:
        if s in new:
            out.extend(new[s].pieces)
        else:
            out.append(tok.token_to_id(s))
    return out


def _unigram(tok: "Tokenizer", terms, pieces) -> TokenizerExtension:
    from tokenizers import Tokenizer

    spec = _spec(tok)
    vocab: list = spec["model"]["vocab"]
    n = len(vocab)
    added = {a["content"] for a in spec.get("added_tokens") or []}
    if _next_id(spec, n) != n:
        raise SpecError("this Unigram tokenizer keeps added tokens past its pieces, where new pieces would go; "
                        "pass --as added")
    existing = {p for p, _ in vocab}
    new: list[NewToken] = []
    skipped: dict[str, str] = {}
    for term, ids in zip(terms, pieces):
        strs = [vocab[int(i)][0] if 0 <= int(i) < n else None for i in ids]
        why = _unusable(tok, strs, added) if len(ids) >= 2 else "it is already one token"
        piece = "".join(s or "" for s in strs)
        if why is None and (piece in existing or piece in added):
            why = f"{piece!r} is already a piece of the vocabulary; its score keeps it out of the best segmentation"
        if why is not None:
            skipped[term] = why
            continue
        score = sum(float(vocab[int(i)][1]) for i in ids) + UNIGRAM_MARGIN * (len(ids) - 1)
        new.append(NewToken(text=term, piece=piece, id=n + len(new), pieces=[int(i) for i in ids]))
        existing.add(piece)
        vocab.append([piece, score])
    ext = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    return TokenizerExtension(ext, "pieces", new, [], skipped)


def _wordpiece(tok: "Tokenizer", terms, pieces) -> TokenizerExtension:
    from tokenizers import Tokenizer

    spec = _spec(tok)
    model = spec["model"]
    vocab: dict[str, int] = model["vocab"]
    prefix = model.get("continuing_subword_prefix") or "##"
    added = {a["content"] for a in spec.get("added_tokens") or []}
    next_id = _next_id(spec, len(vocab))
    new: list[NewToken] = []
    skipped: dict[str, str] = {}
    for term, ids in zip(terms, pieces):
        strs = [tok.id_to_token(int(i)) for i in ids]
        why = _unusable(tok, strs, added) if len(ids) >= 2 else "it is already one token"
        if why is None:
            piece = strs[0] + "".join(s[len(prefix):] if s.startswith(prefix) else s for s in strs[1:])
            if piece in vocab:
                why = f"{piece!r} is already in the vocabulary"
        if why is not None:
            skipped[term] = why
            continue
        new.append(NewToken(text=term, piece=piece, id=next_id, pieces=[int(i) for i in ids]))
        vocab[piece] = next_id
        next_id += 1
    ext = Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
    return TokenizerExtension(ext, "vocab", new, [], skipped)


def _added(tok: "Tokenizer", terms, pieces) -> TokenizerExtension:
    ext = added_tokenizer(tok, list(terms))
    out = []
    for term, ids in zip(terms, pieces):
        content = term.replace(" ", "▁") if ext.token_to_id(term) is None else term
        out.append(NewToken(text=term, piece=content, id=ext.token_to_id(content), pieces=[int(i) for i in ids]))
    return TokenizerExtension(ext, "added", out, [], {})


def metaspace_style(tok: "Tokenizer") -> tuple[bool, bool]:
    """``(metaspace, prepends)``: does the normalizer turn spaces into ``▁``, and does it add one in
    front of the text (SentencePiece's dummy prefix)?

    >>> # Llama 2 (normalizer Prepend("▁") + Replace(" ", "▁")): (True, True); Gemma: (True, False)
    """
    if tok.normalizer is None:
        return False, False
    probe = tok.normalizer.normalize_str("a b")
    metaspace = SPACE in probe and " " not in probe
    return metaspace, metaspace and probe.startswith(SPACE)


def added_tokenizer(tok: "Tokenizer", terms: Sequence[str]) -> "Tokenizer":
    """A copy of ``tok`` with ``terms`` added as HF *added tokens* (ids ``len(tok)``, ``len(tok)+1``,
    …): the ``--as added`` form (:func:`extend_tokenizer` writes them into the model instead).

    Added tokens are matched in the raw text before pre-tokenization, longest match first, and not
    normalized, so " hypertension" (with its space) becomes one token wherever it occurs.

    SentencePiece-style tokenizers get their terms in the ``▁`` form, matched in the normalized
    text. HF normalizes such a token's own text too, so a dummy-prefix normalizer
    (``Prepend("▁")``) would turn ``▁term`` into ``▁▁term``; the copy then does the prefix in a
    ``Metaspace`` pre-tokenizer instead (same ids, except that a text starting with a space gets
    no second ``▁``).
    """
    from tokenizers import AddedToken, Tokenizer, normalizers, pre_tokenizers

    ext = Tokenizer.from_str(tok.to_str())
    metaspace, prepends = metaspace_style(tok)
    if not metaspace:
        ext.add_tokens([AddedToken(t, normalized=False, special=False) for t in terms])
        return ext
    if prepends and ext.pre_tokenizer is None:
        ext.normalizer = normalizers.Replace(" ", SPACE)
        ext.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="first", split=False)
    ext.add_tokens([AddedToken(t.replace(" ", SPACE), normalized=True, special=False) for t in terms])
    return ext
