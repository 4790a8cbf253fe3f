"""``extend --method merges``: continued BPE on SmolLM2-135M against an independent plain
continued BPE (tests/references.py), with the written tokenizer read back by HF ``tokenizers``."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UDHR = ROOT / "corpora" / "udhr"
ROWS = 150


def _texts(code: str) -> list[str]:
    return [json.loads(line)["text"] for line in (UDHR / f"{code}.jsonl").read_text("utf-8").splitlines()]


@pytest.fixture(scope="module")
def tok(smollm2_model):
    from embscope.models.fullmodel import load_hf_tokenizer

    return load_hf_tokenizer(smollm2_model)


@pytest.fixture(scope="module")
def khmer(smollm2_model, tmp_path_factory):
    """Khmer UDHR units 0–22 learned from (units 23–30 held out), up to 150 rows."""
    from embscope.extension import ExtensionOptions, suggest

    texts = _texts("khm")
    train, held = texts[:23], texts[23:]
    corpus = tmp_path_factory.mktemp("khm") / "khm.txt"
    corpus.write_text("\n".join(t.replace("\n", " ") for t in train) + "\n", "utf-8")
    result = suggest(smollm2_model, corpus, ExtensionOptions(method="merges", rows=ROWS, min_freq=2, diagnostics=False))
    written = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    result.extension.tokenizer.save(str(written))
    return result, [t.replace("\n", " ") for t in train], held, written


def _held_tokens(t, texts) -> int:
    return sum(len(e.ids) for e in t.encode_batch(texts, add_special_tokens=False))


def test_merges_reach_plain_continued_bpe(khmer, tok):
    from tokenizers import Tokenizer

    from tests.references import naive_continued_bpe, with_merges

    result, train, held, written = khmer
    ext = result.extension
    assert 0 < len(ext.tokens) <= ROWS and result.summary.rows == ROWS
    ref = naive_continued_bpe(tok, train, ROWS, min_freq=2)
    ours = Tokenizer.from_file(str(written))  # the file as written, read by HF tokenizers
    base = _held_tokens(tok, held)
    ours_cut, ref_cut = base - _held_tokens(ours, held), base - _held_tokens(with_merges(tok, ref), held)
    assert ref_cut > 0.3 * base  # a script SmolLM2 splits into bytes: the reference cuts a lot
    assert ours_cut >= 0.95 * ref_cut
    assert ext.merges == ref  # the same rules, so the same merges, in the same order


def test_no_dead_merge_and_old_texts_unchanged(khmer, tok):
    from tokenizers import Tokenizer

    result, train, held, written = khmer
    ours = Tokenizer.from_file(str(written))
    new = {t.id: t for t in result.extension.tokens}
    by_piece = {t.piece: t for t in result.extension.tokens}
    seen: set[int] = set()
    for texts in (train, held, _texts("eng")):
        for a, b in zip(tok.encode_batch(texts, add_special_tokens=False),
                        ours.encode_batch(texts, add_special_tokens=False)):
            # every new token stands for exactly the old tokens it replaces; nothing else moves
            assert [j for i in b.ids for j in (new[i].pieces if i in new else [i])] == a.ids
            seen.update(i for i in b.ids if i in new)
    alive = set(seen)  # a merge fires if its token is emitted or is a side of a merge that fires
    for (left, right), t in reversed(list(zip(result.extension.merges, result.extension.tokens))):
        if t.id in alive:
            alive.update(by_piece[s].id for s in (left, right) if s in by_piece)
    assert alive == set(new)
    english = _texts("eng")
    assert [e.ids for e in ours.encode_batch(english)] == [e.ids for e in tok.encode_batch(english)]
    check = result.summary.tokenization_check
    assert check.corpus.cut == check.corpus.not_their_pieces == 0 and check.general.new_tokens == 0


def test_word_frequency_list_is_a_corpus(smollm2_model, tok, tmp_path):
    from embscope.extension import ExtensionOptions, suggest
    from embscope.extension.merges import is_word_list

    counts = Counter(w for t in _texts("hin") for w in t.split())
    listed = tmp_path / "hin.tsv"
    listed.write_text("".join(f"{w}\t{c}\n" for w, c in counts.most_common()), "utf-8")
    assert is_word_list(listed) and not is_word_list(UDHR / "hin.jsonl")
    result = suggest(smollm2_model, listed, ExtensionOptions(method="merges", rows=40, min_freq=2, diagnostics=False))
    s = result.summary
    assert s.corpus_texts == len(counts) and 0 < s.tokens_added <= 40
    # its savings, recounted here: every listed word as " word", weighted by its count
    ext = result.extension.tokenizer
    words = [" " + w for w in counts]
    before = sum(c * len(e.ids) for c, e in zip(counts.values(), tok.encode_batch(words, add_special_tokens=False)))
    after = sum(c * len(e.ids) for c, e in zip(counts.values(), ext.encode_batch(words, add_special_tokens=False)))
    assert (s.corpus_tokens, s.corpus_tokens_after) == (before, after) and after < before


def test_rows_bound_the_term_method(smollm2_model):
    from embscope.extension import ExtensionOptions, suggest

    # the medical corpus's abbreviations file (a ninth of its bytes): its 40 best terms take 57 rows
    corpus = ROOT / "corpora" / "medical" / "abbreviations.jsonl"
    free = suggest(smollm2_model, corpus, ExtensionOptions(top=40, diagnostics=False))
    assert len(free.extension.tokens) > 25  # the bound below binds
    bounded = suggest(smollm2_model, corpus, ExtensionOptions(top=40, rows=25, diagnostics=False))
    n = len(bounded.extension.tokens)
    assert 0 < n <= 25 and bounded.summary.rows == 25
    assert any("past --rows 25" in why for why in bounded.summary.terms_skipped.values())


def test_merges_need_rows():
    from embscope.errors import SpecError
    from embscope.sections.options import RunOptions

    with pytest.raises(SpecError, match="--method merges needs --rows N"):
        RunOptions.build(method="merges")
    with pytest.raises(SpecError, match="--method 'merge'"):
        RunOptions.build(method="merge", rows=5)
