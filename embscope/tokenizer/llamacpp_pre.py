"""llama.cpp's pre-tokenizers: ``tokenizer.ggml.pre`` name → the split regexes llama.cpp applies.

A GGUF file names its pre-tokenizer (``tokenizer.ggml.pre``); llama.cpp maps the name to a type and
each type to an ordered list of regexes (``src/llama-vocab.cpp``, ``llm_tokenizer_bpe``). Each
regex splits every fragment the previous one left into matched and unmatched pieces; BPE merges
then run inside each final piece. The regexes below are those published there (the "adapted"
ones llama.cpp runs, which spell ``(?i:'s|…)`` as ``'[sS]|…``); the name lists follow the same
file. Types whose split is custom C++ code rather than a regex (``kimi-k2``, ``afmoe``) are listed
in :data:`CUSTOM_PRE` and are not rebuilt here.

Worked example (``starcoder``): ``"x 2024"`` → regex 1 ``\\p{N}`` isolates each digit →
``["x ", "2", "0", "2", "4"]`` → regex 2 (GPT-2's) splits ``"x "`` into ``["x", " "]``.
"""

from __future__ import annotations

# Building blocks that recur across types.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
_QWEN2 = (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_CASED_WORD = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+{c}"
               r"|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*{c}")
# Letters llama.cpp lists for deepseek-llm; the \\u escapes are code points that Unicode
# normalisation would fold into others (U+2126 OHM SIGN → Ω), written out so they survive.
_DEEPSEEK_LETTERS = (
    "A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\u1f7dᾀ-ᾴᾶ-ᾼ\u1fbeῂ-ῄῆ-ῌῐ"
    "-\u1fd3ῖ-\u1fdbῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\u2126ℨ\u212a-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃")
_PUNCT_WORD = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+")

#: llama.cpp pre-tokenizer type → its regexes, applied in order
PRE_REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    "llama3": (_LLAMA3,),
    "jais2": (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
              r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
              r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",),
    "deepseek-llm": ("[\r\n]", r"\s?[" + _DEEPSEEK_LETTERS + "]+", r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
                     r"\s+$", "[一-龥ࠀ-一가-퟿]+", r"\p{N}+"),
    "deepseek3-llm": (r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                      _PUNCT_WORD + r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "spark2_5": (r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
                 _PUNCT_WORD + r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"),
    "youtu": ("[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
              r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:" + _CONTR
              + r")?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:"
              + _CONTR + r")?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "deepseek-coder": ("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+", r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, "[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", _GPT2),
    "gpt2": (_GPT2,),
    "qwen2": (_QWEN2,),
    "qwen35": (_CONTR + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "poro": (r" ?[^(\s|.,!?…。，、।۔،)]+",),
    "chatglm4": (_LLAMA3,),
    "viking": (r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"),
    "tekken": (_CASED_WORD.replace("{c}", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+",),
    "chameleon": ("<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )",
                  r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", _GPT2),
    "gpt4o": (_CASED_WORD.replace("{c}", "(?:" + _CONTR + ")?") + r"|\p{N}{1,3}"
              r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "granite-emb-multi": (
        _CASED_WORD.replace("(?=[\\p{L}])", "(?=[\\p{L}\\p{M}])").replace("{c}", "(?:" + _CONTR + ")?")
        + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "tiny-aya": (r"\d{1,3}(?=(?:\d{3})*\b)",
                 r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:" + _CONTR
                 + r")?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:"
                 + _CONTR + r")?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "superbpe": (r"\p{N}+", r"(?=(\d{3})+(?!\d))"),
    "bailingmoe": (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",),
    "seed-coder": (_CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                   r"|\s+(?!\S)|\s+",),
    "ufakzeka": (r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",),
    "grok-2": (_QWEN2,),
    "laguna": ("[^\\n]+|[\\n]+", _QWEN2),
    "exaone-moe": (_CONTR + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",),
    "gemma4": ("[^\\n]+|[\\n]+",),
    "minicpm5": (r"\p{N}{1,3}", _CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "whitespace": (r"\S+",),
}

#: ``tokenizer.ggml.pre`` name → llama.cpp pre-tokenizer type (key of :data:`PRE_REGEXES`)
PRE_NAMES: dict[str, str] = {
    "default": "default",
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano", "dbrx", "smaug-bpe"], "llama3"),
    "jais-2": "jais2",
    "deepseek-llm": "deepseek-llm",
    "deepseek-coder": "deepseek-coder",
    **dict.fromkeys(["deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"], "deepseek3-llm"),
    "spark2_5": "spark2_5",
    "youtu": "youtu",
    "falcon": "falcon",
    **dict.fromkeys(["starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                     "mellum2"], "starcoder"),
    **dict.fromkeys(["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                     "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
                     "exaone4", "mpt", "olmo", "jais", "trillion", "granite-docling"], "gpt2"),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan",
                     "solar-open"], "qwen2"),
    "qwen35": "qwen35",
    **dict.fromkeys(["gemma4", "granite-embed-multi-311m", "sarvam-moe"], "gemma4"),
    "whitespace": "whitespace",
    **dict.fromkeys(["poro-chat", "bloom", "gpt3-finnish"], "poro"),
    **dict.fromkeys(["glm4", "chatglm-bpe"], "chatglm4"),
    "viking": "viking",
    "tekken": "tekken",
    "chameleon": "chameleon",
    **dict.fromkeys(["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], "gpt4o"),
    "granite-embed-multi-97m": "granite-emb-multi",
    **dict.fromkeys(["tiny_aya", "cohere2moe"], "tiny-aya"),
    "superbpe": "superbpe",
    **dict.fromkeys(["bailingmoe", "bailingmoe2", "llada-moe"], "bailingmoe"),
    "seed-coder": "seed-coder",
    "ufakzeka": "ufakzeka",
    "grok-2": "grok-2",
    "laguna": "laguna",
    "exaone-moe": "exaone-moe",
    "minicpm5": "minicpm5",
}

#: names whose split is custom code in llama.cpp, not a regex: rebuilt through transformers instead
CUSTOM_PRE = frozenset({"kimi-k2", "afmoe"})

#: names for which llama.cpp emits a whole pre-token directly when it is in the vocabulary
#: (``ignore_merges``), as HF ``tokenizers``' BPE option of the same name does
IGNORE_MERGES = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                           "midm-2.0", "lfm2", "jina-v5-nano", "youtu", "tekken",
                           "granite-embed-multi-97m", "minicpm5"})

#: types that work on raw UTF-8 (``byte_encode = false``), not GPT-2's byte-to-character table
RAW_UTF8 = frozenset({"gemma4", "whitespace"})


def pre_type(name: str | None) -> str | None:
    """The llama.cpp pre-tokenizer type for a ``tokenizer.ggml.pre`` name; ``None`` when unknown.

    A missing name means ``default``, as llama.cpp does (with its "regenerate the model" warning).

    >>> pre_type("command-r"), pre_type(None), pre_type("no-such-name")
    ('starcoder', 'default', None)
    """
    if not name:
        return "default"
    return PRE_NAMES.get(name)
