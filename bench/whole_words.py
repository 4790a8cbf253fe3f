"""Whole-word share of the extension's candidate terms, per UDHR language, and what the terms save.

Whole-word share: of the distinct one-word candidate terms counted in a UDHR text
(:func:`embscope.extension.candidates.count_terms`, every frequency), the share whose text, less
its leading space or ``▁``, is a word of the text under a reference segmentation this script
computes itself (:func:`reference_words`): chunks between characters that are neither letters nor
combining marks nor ZWNJ/ZWJ (``unicodedata`` categories, one character at a time, no regular
expression), and, in scripts written without spaces, those chunks cut by a single-language
segmenter where one is installed (jieba for Chinese, PyThaiNLP for Thai, khmer-nltk for Khmer),
otherwise by ICU's word break (the segmenter embscope uses: then the figure checks only the rest
of the rule).

Savings: ``extend --top 50 --min-freq 2 --no-diagnostics`` on the same text (tokens saved on it,
measured by re-tokenizing, and how many of the added terms are whole words).

    python bench/whole_words.py [--model gemma3-270m] [--langs hin,tam,...]
"""

from __future__ import annotations

import argparse
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UDHR = ROOT / "corpora" / "udhr"
LANGS = "eng,swh,vie,hin,ben,tam,mya,amh,khm,tha,cmn_hans"
JOIN = "\u200c\u200d"


def _inside(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LM" or ch in JOIN


def _chunks(text: str) -> list[str]:
    out, cur = [], []
    for ch in text:
        if _inside(ch):
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _segmenter(lang: str):
    """A single-language segmenter for the no-space languages, or None."""
    try:
        if lang.startswith("cmn"):
            import jieba

            return lambda s: list(jieba.cut(s))
        if lang == "tha":
            from pythainlp.tokenize import word_tokenize

            return lambda s: word_tokenize(s, engine="newmm")
        if lang == "khm":
            from khmernltk import word_tokenize

            return word_tokenize
    except ImportError:
        return None
    return None


NO_SPACE_LANGS = {"cmn_hans", "tha", "khm", "mya", "lao", "jpn"}


def reference_words(text: str, lang: str) -> tuple[set[str], str]:
    """``(words, reference name)`` of ``text`` (module docstring)."""
    chunks = _chunks(text)
    if lang not in NO_SPACE_LANGS:
        return set(chunks), "letter/mark runs"
    seg = _segmenter(lang)
    name = "ICU"
    if seg is None:
        from embscope.text.words import segment_run

        seg = segment_run
    else:
        name = {"cmn_hans": "jieba", "tha": "PyThaiNLP", "khm": "khmer-nltk"}[lang]
    out = set()
    for c in chunks:
        out.update(p for w in seg(c) for p in _chunks(w))
    return out, name


def whole_word_share(tok, texts: list[str], lang: str) -> tuple[float, int, str]:
    """``(share, distinct terms, reference)`` for the candidates of ``texts``."""
    from embscope.extension.candidates import count_terms

    counts, _ = count_terms(tok, texts)
    ref, name = reference_words("\n".join(texts), lang)
    terms = [t.lstrip(" ▁") for t in counts]
    return sum(t in ref for t in terms) / max(len(terms), 1), len(terms), name


def main() -> None:
    import json

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gemma3-270m")
    ap.add_argument("--langs", default=LANGS)
    ap.add_argument("--no-savings", action="store_true")
    args = ap.parse_args()
    import embscope
    from embscope.errors import CorpusError
    from embscope.extension import ExtensionOptions, suggest
    from embscope.models.fullmodel import load_hf_tokenizer

    model = embscope.load_model(args.model, device="cpu")
    tok = load_hf_tokenizer(model)
    print("| language | distinct terms | whole-word share | reference | terms added | whole | tokens saved |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for lang in args.langs.split(","):
        path = UDHR / f"{lang}.jsonl"
        texts = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line]
        share, n, name = whole_word_share(tok, texts, lang)
        row = f"| {lang} | {n} | {100 * share:.1f} % | {name} |"
        if not args.no_savings:
            try:
                r = suggest(model, path, ExtensionOptions(top=50, min_freq=2, diagnostics=False))
            except CorpusError:
                print(row + " 0 | 0 | no candidate |", flush=True)
                continue
            ref, _ = reference_words("\n".join(texts), lang)
            added = [t.text for t in r.extension.tokens if t.kind == "term"]
            whole = sum(t.lstrip(" ▁") in ref for t in added)
            s = r.summary
            row += f" {len(added)} | {whole} | {s.tokens_saved:,} of {s.corpus_tokens:,} ({100 * s.saved_fraction:.1f} %) |"
        print(row, flush=True)


if __name__ == "__main__":
    main()
