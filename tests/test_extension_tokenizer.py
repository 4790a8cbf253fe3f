"""New tokens written in the tokenizer's own terms (embscope.tokenizer.extend), on real tokenizers:
SmolLM2's byte-level BPE (rebuilt from its GGUF), Llama 2's SentencePiece BPE and XLM-R's Unigram
(llama.cpp's vocab GGUFs). Measured on UDHR English and the held-out medical lines (1 line in 4,
the split every extension figure uses)."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from tests.conftest import VOCABS, needs_vocabs

ROOT = Path(__file__).resolve().parents[1]
MEDICAL = ROOT / "corpora" / "medical"
#: terms added: as many as extend adds by default
TOP = 200


@pytest.fixture(scope="module")
def texts():
    from embscope.corpus.stream import read_texts

    med = read_texts(MEDICAL)
    held = [t for t in med if zlib.crc32(t.encode("utf-8")) % 4 == 0]
    return {"medical": med, "held": held, "udhr": read_texts(ROOT / "corpora" / "udhr" / "eng.jsonl")}


def _extension(tok, texts, form="model", top=TOP):
    from embscope.extension.candidates import find_candidates
    from embscope.tokenizer.extend import extend_tokenizer

    cands = find_candidates(tok, texts["medical"], min_freq=5)[:top]
    return cands, extend_tokenizer(tok, [c.term for c in cands], [c.piece_ids for c in cands], form=form)


@pytest.fixture(scope="module")
def smol(smollm2_model, texts):
    from embscope.models.fullmodel import load_hf_tokenizer

    tok = load_hf_tokenizer(smollm2_model)
    return (tok, *_extension(tok, texts))


def _word_changes(tok, ext, texts):
    """Per pre-token word of ``texts``: ``(changed words, changed words holding no term's pieces)``,
    and every changed word's new tokens checked to be runs of its old tokens."""
    new_ids = {t.id: t for t in ext.tokens}
    terms = [t.pieces for t in ext.tokens if t.kind == "term"]
    changed, without_term = 0, []
    for text in texts:
        for word, _ in tok.pre_tokenizer.pre_tokenize_str(text):
            old = [t.id for t in tok.model.tokenize(word)]
            new = [t.id for t in ext.tokenizer.model.tokenize(word)]
            if old == new:
                continue
            changed += 1
            # the new tokens are the old ones with runs joined, each run exactly a new token's pieces
            rebuilt = [p for i in new for p in (new_ids[i].pieces if i in new_ids else [i])]
            assert rebuilt == old, (word, old, new)
            if not any(old[k:k + len(p)] == p for p in terms for k in range(len(old))):
                without_term.append(word)
    return changed, without_term


def test_bpe_merges_never_cut_a_word_and_round_trip(smol, texts):
    """SmolLM2 + 200 medical terms as merges: on UDHR English and the held-out medical lines, text
    decodes back to itself, no new token starts or ends inside an old token, and every word that
    changes only has runs of its old tokens joined into the new token made of exactly those."""
    from embscope.tokenizer.tokenization_check import changes

    tok, cands, ext = smol
    assert ext.form == "merges" and not ext.skipped
    terms = ext.terms()
    assert len(terms) == TOP and len(ext.tokens) > TOP  # chains of 3+ pieces bring intermediates
    assert len(ext.merges) == len(ext.tokens)  # one merge per new token: each builds its token
    for name in ("udhr", "held"):
        c = changes(tok, ext, texts[name])
        assert c.cut == 0 and c.not_their_pieces == 0 and c.round_trip_failures == 0, (name, c)
    for name in ("udhr", "medical"):  # decode(encode(text)) == text on the whole corpus, fit lines too
        encs = ext.tokenizer.encode_batch(texts[name], add_special_tokens=False)
        assert [ext.tokenizer.decode(e.ids) for e in encs] == texts[name]
    assert changes(tok, ext, texts["held"]).new_tokens > 4000
    changed, without_term = _word_changes(tok, ext, texts["held"] + texts["udhr"])
    assert changed > 4000
    # words without a whole term change only through a chain's intermediate token (" cholecyst" +
    # "ectomy"): a handful, each a word beginning with the pieces of a term's beginning
    assert len(without_term) < 0.03 * changed, without_term[:20]
    assert _word_changes(tok, ext, texts["udhr"]) == (0, [])


def test_every_term_is_one_token_where_its_word_occurs(smol):
    tok, cands, ext = smol
    for t in ext.terms():
        got = ext.tokenizer.encode(f"Patients with{t.text} and others" if t.text.startswith(" ") else f"{t.text} of x",
                                   add_special_tokens=False).ids
        assert t.id in got, t.text
        assert [i for i in tok.encode(t.text, add_special_tokens=False).ids] == t.pieces
    # a new token is built inside a longer word only from its own pieces: never " externa" + "l"
    by_text = {t.text: t for t in ext.tokens}
    for word in (" external", " Harrison", " Toxicity", " Insecticide", " unspecifiedly"):
        new = ext.tokenizer.encode(word, add_special_tokens=False).ids
        old = tok.encode(word, add_special_tokens=False).ids
        pieces = [p for i in new for p in (next(t.pieces for t in ext.tokens if t.id == i)
                                             if i >= tok.get_vocab_size(True) else [i])]
        assert pieces == old, word
    assert " unspecified" in by_text


def test_added_tokens_do_cut_words(smol, texts):
    """The same terms as HF added tokens (``--as added``) are matched inside words: the check
    above would fail for them (what the merges fix)."""
    from embscope.tokenizer.tokenization_check import changes
    from embscope.tokenizer.extend import extend_tokenizer

    tok, cands, _ = smol
    added = extend_tokenizer(tok, [c.term for c in cands], [c.piece_ids for c in cands], form="added")
    c = changes(tok, added, texts["held"])
    assert added.form == "added" and c.cut > 50 and c.examples


def test_written_tokenizer_loads_in_tokenizers_and_transformers(smol, smollm2_model, texts, tmp_path):
    """The tokenizer.json that --apply writes (GGUF input → HF folder) loads in ``tokenizers`` and in
    transformers' AutoTokenizer (no remote code) and gives the ids embscope measured with."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from embscope.models.writer import hf_tokenizer

    tok, _, ext = smol
    hf_tokenizer(smollm2_model, ext.tokenizer, smollm2_model.config).save_pretrained(str(tmp_path))
    sample = texts["held"][:400] + texts["udhr"]
    want = [e.ids for e in ext.tokenizer.encode_batch(sample, add_special_tokens=False)]
    assert [e.ids for e in Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode_batch(
        sample, add_special_tokens=False)] == want
    auto = AutoTokenizer.from_pretrained(str(tmp_path), trust_remote_code=False)
    assert auto(sample, add_special_tokens=False)["input_ids"] == want
    assert len(auto) == ext.tokens[-1].id + 1
    assert auto.decode(want[0]) == sample[0]


@needs_vocabs
def test_sentencepiece_bpe_merges_never_cut_a_word():
    """Llama 2's SentencePiece BPE (no pre-tokenizer: a line is one word to the model): new merges
    join only runs of old pieces inside one ▁-word."""
    from embscope.corpus.stream import read_texts
    from embscope.tokenizer.tokenization_check import changes
    from embscope.tokenizer.load import load_tokenizer_file

    tok = load_tokenizer_file(VOCABS / "ggml-vocab-llama-spm.gguf").tok
    med = read_texts(MEDICAL)
    held = [t for t in med if zlib.crc32(t.encode("utf-8")) % 4 == 0]
    cands, ext = _extension(tok, {"medical": med[:12000]}, top=100)
    assert ext.form == "merges" and len(ext.terms()) + len(ext.skipped) == 100 and len(ext.terms()) > 90
    assert all(t.piece.startswith("▁") or t.kind == "intermediate" or not t.text.startswith("▁") for t in ext.tokens)
    for sample in (held, read_texts(ROOT / "corpora" / "udhr" / "eng.jsonl")):
        c = changes(tok, ext, sample)
        assert c.cut == 0 and c.not_their_pieces == 0 and c.round_trip_failures == 0, c
    assert changes(tok, ext, held).new_tokens > 1000


@needs_vocabs
def test_unigram_pieces_change_only_their_own_runs():
    """XLM-R's Unigram (nomic's GGUF): each new piece scores its pieces' sum plus (k − 1)·ε, so
    Viterbi takes it exactly where the old best segmentation held its pieces."""
    from embscope.corpus.stream import read_texts
    from embscope.tokenizer.tokenization_check import changes
    from embscope.tokenizer.load import load_tokenizer_file

    tok = load_tokenizer_file(VOCABS / "ggml-vocab-nomic-bert-moe.gguf").tok
    med = read_texts(MEDICAL)
    held = [t for t in med if zlib.crc32(t.encode("utf-8")) % 4 == 0]
    cands, ext = _extension(tok, {"medical": med[:12000]}, top=100)
    assert ext.form == "pieces" and len(ext.terms()) > 90
    for t in ext.terms():
        assert ext.tokenizer.model.tokenize(t.piece)[0].id == t.id
    for sample in (held, read_texts(ROOT / "corpora" / "udhr" / "eng.jsonl")):
        c = changes(tok, ext, sample)
        assert c.cut == 0 and c.not_their_pieces == 0 and c.round_trip_failures == 0, c
    assert changes(tok, ext, held).new_tokens > 1000


def test_forms_and_unsupported_models_say_what_to_do(smol):
    from embscope.errors import SpecError
    from embscope.tokenizer.extend import extend_tokenizer

    tok = smol[0]
    with pytest.raises(SpecError, match="choose from model, added"):
        extend_tokenizer(tok, [], [], form="merges")
    ext = extend_tokenizer(tok, [" hello", " unspecified"], [[tok.token_to_id("Ġhello")],
                                                            [tok.token_to_id("Ġun"), tok.token_to_id("specified")]])
    assert ext.skipped == {" hello": "it is already one token"} and [t.text for t in ext.tokens] == [" unspecified"]


def test_extend_reads_at_least_20_kb_of_held_out_text(smol, texts):
    """``extend``'s bits per byte read ≥ 20 KB of held-out medical text (1 line in 4, never a fit
    line), as many bytes as the plan asks for; ``audit``'s plan reads less and says how much."""
    from embscope.extension.contexts import collect, is_held_out, spread
    from embscope.extension.evaluate import AUDIT_PLAN, Plan

    tok, _, ext = smol
    plan = Plan()
    assert plan.corpus_bytes >= 20 * 1024 and AUDIT_PLAN.corpus_bytes < plan.corpus_bytes
    found = collect(texts["medical"], ext.tokenizer, ext.ids, [t.pieces for t in ext.tokens],
                    [tok.token_to_id("<|endoftext|>")], bpb_bytes=plan.corpus_bytes)
    held = spread(list(found.texts), plan.corpus_bytes)
    size = sum(len(t.encode("utf-8")) for t in held)
    assert size >= 20 * 1024 and abs(size - plan.corpus_bytes) < 1024
    assert all(is_held_out(t) for t in held) and len(set(held)) == len(held)


def test_kept_spec_writes_the_json_of_the_merged_spec(smol):
    """The extended spec written from the kept text of the vocabulary and merges is the JSON of the
    merged dictionaries, byte for byte; a tokenizer changed in place is parsed anew, and a new
    piece that replaces an old key (never made by extend) falls back to the merged dictionaries."""
    import json

    from tokenizers import Tokenizer

    from embscope.tokenizer.bpe_spec import bpe_spec, extended_json

    tok, _, ext = smol
    base = bpe_spec(tok.to_str())
    assert bpe_spec(tok.to_str()) is base  # kept
    spec, model = json.loads(tok.to_str()), json.loads(tok.to_str())["model"]

    def merged(vocab, merges):
        return json.dumps({**spec, "model": {**model, "vocab": {**model["vocab"], **vocab},
                                             "merges": model["merges"] + [list(p) for p in merges]}},
                          ensure_ascii=False)

    new = {t.piece: t.id for t in ext.tokens}
    for vocab, merges in ((new, ext.merges), ({}, []), ({"Ġhello": 7}, [("Ġhel", "lo")])):
        assert extended_json(base, vocab, merges) == merged(vocab, merges)
    assert Tokenizer.from_str(extended_json(base, new, ext.merges)).to_str() == ext.tokenizer.to_str()
    changed = Tokenizer.from_str(tok.to_str())
    changed.add_tokens(["embscope-test-token"])
    assert bpe_spec(changed.to_str()) is not base
