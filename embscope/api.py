"""The Python API: one function per command, with the command's options as keyword parameters.

Each function names the sections it runs and hands its options, checked, to the runner
(:func:`embscope.runner.run`: resolve → load → sections → tables → report). Every option keyword is
a field of :class:`~embscope.sections.options.RunOptions` (its stage group says what reads it), with
the same default; a misspelt keyword is a one-line :class:`~embscope.errors.SpecError` naming the
closest one. A folder is written only when ``out`` is given (``DEFAULT_OUT``: ``reports/<name>-<UTC
time>``); the result always holds the summary and the tables.

>>> import embscope
>>> res = embscope.scan("minilm-l6", scan=False)
>>> res.folder is None, res.summary.sections.tokens.categories, res.tables["tokens"].height
(True, {'special': 5, 'normal': 30517}, 30522)
>>> embscope.scan("minilm-l6", thresold=3)
Traceback (most recent call last):
...
embscope.errors.SpecError: scan() has no option 'thresold' (did you mean 'threshold'?); see help(embscope.scan)
"""

# long: the public API, one function per command, each documenting every parameter it takes (the docstrings are most of its lines)
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from embscope.arguments import checked
from embscope.models.registry import DEFAULT_MODEL
from embscope.output import DEFAULT_OUT, DefaultFolder
from embscope.runner import DEFAULT_LANGUAGES, SHIPPED_CORPORA, Given, Job, RunResult, corpus_path, run
from embscope.sections.options import RunOptions
from embscope.sections.options import choices as option_choices

__all__ = ["audit", "scan", "check", "diff", "fertility", "compare", "extend", "rope", "export_atlas",
           "export_projector", "read_tokens_table", "option_choices", "DEFAULT_OUT", "SHIPPED_CORPORA", "RunOptions",
           "RunResult"]

F = TypeVar("F", bound=Callable[..., Any])
#: where an API function writes: a folder, ``DEFAULT_OUT``, or None (nothing is written)
Out = str | Path | DefaultFolder | None
Paths = Sequence[str | Path]


def api_function(fn: F) -> F:
    """Check ``fn``'s keyword names and argument types before it runs (a typo is one line with "did
    you mean", a wrong type one :class:`~embscope.errors.ArgumentError` line: :mod:`embscope.arguments`).
    Every parameter is documented in ``fn``'s own docstring, in the source (``tests/test_docs.py``
    checks that each is named there)."""
    import inspect

    from embscope.arguments import check_call
    from embscope.errors import SpecError, did_you_mean

    params = inspect.signature(fn).parameters
    names = [p for p in params if p not in ("args", "kwargs")]

    @functools.wraps(fn)
    def checked(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs:
            if name not in params:
                raise SpecError(f"{fn.__name__}() has no option {name!r}{did_you_mean(name, names)}; "
                                f"see help(embscope.{fn.__name__})")
        check_call(fn, args, kwargs)  # types from the annotations, before any work (embscope.arguments)
        return fn(*args, **kwargs)

    return checked  # type: ignore[return-value]


def _options(values: dict[str, Any], **overrides: Any) -> RunOptions:
    """The checked :class:`RunOptions` of an API call: its parameters (``locals()``) named like an
    option, sequences as lists, paths as strings; ``overrides`` replace them."""
    fields = {}
    for name in RunOptions.names():
        if name in values:
            v = values[name]
            fields[name] = (list(v) if isinstance(v, (tuple, list)) else str(v) if isinstance(v, Path) else v)
    return RunOptions.build(**{**fields, **overrides})


def _paths(spec: str | Path | Paths) -> list[str | Path]:
    return [spec] if isinstance(spec, (str, Path)) else list(spec)


def _languages(languages: str | Path | None, flag: str) -> tuple[list[str | Path], list[str]]:
    """The per-language corpus as a list (empty for None or ``"none"``), and the note when the
    shipped default is not installed (the run goes on without it)."""
    from embscope.errors import CorpusError

    if languages in (None, "none"):
        return [], []
    if languages == DEFAULT_LANGUAGES:
        try:
            corpus_path(DEFAULT_LANGUAGES)
        except CorpusError:  # an install without the shipped corpora: say so, run the rest
            return [], [f"the shipped {DEFAULT_LANGUAGES!r} corpus is not installed here; pass {flag} PATH for "
                        "per-language figures"]
    return [languages], []


def _audit_lang(lang: Sequence[str], languages) -> list[str]:
    """``lang`` as given; none given on the shipped UDHR (by name or path): audit's bounded set
    (``set:audit``); on any other corpus, every language."""
    from embscope.errors import CorpusError
    from embscope.languages.selection import AUDIT_SET

    if lang or languages in (None, "none"):
        return list(lang)
    try:
        shipped = Path(corpus_path(languages)).resolve() == Path(corpus_path(DEFAULT_LANGUAGES)).resolve()
    except CorpusError:  # a missing corpus is the run's to report
        shipped = False
    return [AUDIT_SET] if shipped else []


@api_function
def audit(model: str = DEFAULT_MODEL, *, corpora: Paths = (), languages: str | Path | None = DEFAULT_LANGUAGES,
          data: Paths = (), out: Out = None, force: bool = False, verbose: bool | None = None,
          # load
          device: str = "auto", download: str = "ranges", trust_pickle: bool = False,
          # scan (verify: automatic) and repair
          scan: bool = True, k: int = 10, knn_method: str = "auto", map: bool = True, threshold: float = 4.0,
          unused_ids: Sequence[int] | None = None, verify: int | None = None, verify_sample: str = "top",
          verify_work: float | None = None, cache_dir: str | Path | None = None,
          repair_to: str | Path | None = None, repair_init: str = "subword-mean",
          # corpora
          sample_bytes: int | None = None, engine: str = "local", workers: int | None = None,
          ray_address: str | None = None, text_field: str = "text", lang_field: str = "lang",
          limits: Sequence[str] = (), reference: str = "eng",
          # extension
          top: int = 200, max_ngram: int = 1, min_freq: int = 5, init: Sequence[str] = ("auto",),
          diagnostics: bool = True, extend_as: str = "model", bpb_bytes: int | None = None,
          distil_work: float | None = None, norm_correction: bool = False,
          # the check of ``data``
          data_format: str | None = None, max_length: int | None = None, chat_template: str | Path | None = None,
          trainer: str = "trl", pad_token: str | None = None, split: str | None = None,
          lf_template: str | None = None, train_on_prompt: bool = False, mask_history: bool = False,
          gguf_tokenizer: str = "llamacpp", responses_only: bool = False, instruction_part: str | None = None,
          response_part: str | None = None, model_work: float | None = None,
          unit_field: str = "unit", lang: Sequence[str] = ()) -> RunResult:
    """The whole review: context, tokens + geometry, languages, extension; HTML + Parquet.

    Args:
        model: model spec (alias, hub id, folder, ``.gguf``).
        corpora: domain corpora (paths or shipped names); the first single-language one gives the
            extension candidates, and each adds its languages to the language table; ``repair_to``
            re-initialises the flagged rows they use.
        languages: the multilingual corpus for per-language costs (default the shipped ``udhr``);
            ``None`` or ``"none"`` for none. ``lang`` selects its languages; on the shipped UDHR
            the default is ``set:audit``, its 68 first languages (``lang=["set:all"]`` for all 512).
        data: training data: adds the "Ready to fine-tune?" section (:func:`check`'s findings).
        out: the folder to write (``DEFAULT_OUT``: ``reports/<name>-<UTC time>``); None writes nothing.
        force: replace an earlier embscope folder at ``out`` (and at ``repair_to``).
        verbose: every step and its time (None: the process's progress mode).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        download: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full``
            (whole shards) (default ``"ranges"``; one of ranges, full).
        trust_pickle: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``) (default
            ``False``).
        scan: run the geometry scan (indicators, kNN graph) inside the tokens section (default ``True``).
        k: nearest neighbours per row in the kNN graph (default ``10``).
        knn_method: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn) (default
            ``"auto"``; one of auto, exact, certified, hnsw, nndescent).
        map: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on large
            vocabularies) (default ``True``).
        threshold: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row
            is flagged (see embscope.geometry.indicators) (default ``4.0``).
        unused_ids: token ids known to be unused (the Magikarp reference set); null finds them automatically
            (default ``None``).
        verify: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
            null: automatic (``audit``): a random sample when the whole weights fit the memory budget (default
            ``None``).
        verify_sample: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of
            all flags) (default ``"top"``; one of top, random).
        verify_work: the prompting's work budget, 10¹² multiply-adds (tokens × parameters; null: the automatic
            run's 30, else none): rows beyond it stay unchecked, so the same rows are checked at any load
            (default ``None``).
        cache_dir: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``) (default
            ``None``).
        repair_to: also write the model with the flagged rows the data uses re-initialised, to this folder
            (default ``None``).
        repair_init: initialisation of the repaired rows: ``NAME`` or ``INPUT/OUTPUT`` (default
            ``"subword-mean"``).
        sample_bytes: cap on corpus bytes read per language (null: all) (default ``None``).
        engine: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a
            cluster) (default ``"local"``; one of local, ray).
        workers: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local
            Ray (default ``None``).
        ray_address: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
            (default ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        lang_field: the language field of records (an empty string: never read a language from records)
            (default ``"lang"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
        reference: reference language for parity (default ``"eng"``).
        top: extension candidates to add (best estimated savings first) (default ``200``).
        max_ngram: longest multi-word extension term, in words (default ``1``).
        min_freq: least occurrences of an extension term (default ``5``).
        init: initialisation strategies to diagnose for extension candidates (``auto``: all, and recommend
            one) (default ``("auto",)``; one of auto, mean, hewitt, subword-mean, weighted-subword, knn-pull,
            subword-mean-norm, omp, distil, focus, random).
        diagnostics: load the whole model (when it fits) for the extension's KL and new-token-mass check
            (default ``True``).
        extend_as: how new tokens are written: ``model`` (BPE merges, Unigram pieces: the tokenizer's own
            terms) or ``added`` (HF added tokens, matched anywhere in the raw text) (default ``"model"``; one
            of model, added).
        bpb_bytes: held-out corpus bytes the extension's bits per byte reads (null: 24 KB in ``extend``, 4 KB
            in ``audit``, which also reads 5 KB of general text instead of all 10 KB) (default ``None``).
        distil_work: the work ``distil`` may do inside ``--init auto``, 10¹² multiply-adds (tokens ×
            parameters, known before it runs; null: 20 in ``extend``, 0 in ``audit``); a named ``--init
            distil`` always runs (default ``None``).
        norm_correction: also diagnose each strategy's per-script norm-corrected twin (``NAME+norm``) (default
            ``False``).
        data_format: training-data record format for the check (null: detected per record) (default ``None``;
            one of preference, kto, messages, sharegpt, prompt-completion, alpaca, text).
        max_length: the trainer's sequence length, tokens (null: the config's context) (default ``None``).
        chat_template: a chat template file (.jinja) to render the training data with (null: the model's own)
            (default ``None``).
        trainer: the trainer whose ids, labels and loss mask the check follows (embscope.readiness.trainers)
            (default ``"trl"``; one of trl, transformers, unsloth, axolotl, llamafactory).
        pad_token: the pad token the user will set (null: the trainer's own choice) (default ``None``).
        split: check only this split of data with several (null: each split, reported on its own) (default
            ``None``).
        lf_template: LLaMA-Factory's ``template`` (``--trainer llamafactory``; null: read off the model's chat
            template, as LLaMA-Factory does when it is unset) (default ``None``).
        train_on_prompt: LLaMA-Factory's ``train_on_prompt``: the prompts in the loss too (default ``False``).
        mask_history: LLaMA-Factory's ``mask_history``: only the last response in the loss (default
            ``False``).
        gguf_tokenizer: a GGUF model's tokenizer for the check: ``llamacpp`` (as llama.cpp splits) or
            ``transformers`` (transformers' GGUF conversion: what a TRL or transformers script loading the
            GGUF gets) (default ``"llamacpp"``; one of llamacpp, transformers).
        responses_only: Unsloth's ``train_on_responses_only`` (``--trainer unsloth``): only the assistant
            responses in the loss (default ``False``).
        instruction_part: its ``instruction_part``, the text that opens a user turn (null: read off the chat
            template) (default ``None``).
        response_part: its ``response_part``, the text that opens an assistant turn (null: read off the chat
            template) (default ``None``).
        model_work: the work the model may do scoring each language's aligned text (``bits_per_byte``,
            ``information_parity``), 10¹² multiply-adds (tokens × parameters, known before it runs; units past
            it are left out in every language; null: 20 in ``fertility --model``, 0.5 in ``audit``; 0: off)
            (default ``None``).
        unit_field: the field of records (jsonl key, Parquet/Arrow column) that aligns them across languages
            (parity compares the units two languages share); a FLORES table without it aligns by ``id``
            (default ``"unit"``).
        lang: languages measured (empty: every language): codes, ``script:XXXX`` (ISO 15924), ``family:NAME``
            (Glottolog) or ``set:audit``; the reference is always measured (docs/languages.md) (default
            ``()``).
    Returns:
        :class:`~embscope.runner.RunResult`: ``.summary`` (one record per section), ``.tables``,
        ``.folder``.
    Example:
        >>> res = audit("smollm2-135m", corpora=["medical"], languages=None, scan=False, top=3, init=["mean"],
        ...             diagnostics=False, model_work=0, sample_bytes=200_000)  # 200 kB of the corpus
        >>> [s for s in ("context", "tokens", "extension") if getattr(res.summary.sections, s) is not None]
        ['context', 'tokens', 'extension']
    """
    # long: the docstring documents each of its parameters
    from embscope.extension.evaluate import AUDIT_CORPUS_BYTES
    from embscope.extension.extension import AUDIT_DISTIL_WORK
    from embscope.languages.model_cost import AUDIT_WORK

    langs, notes = _languages(languages, "languages=")
    options = _options(locals(), bpb_bytes=AUDIT_CORPUS_BYTES if bpb_bytes is None else bpb_bytes,  # a smaller
                       distil_work=AUDIT_DISTIL_WORK if distil_work is None else distil_work,  # extension
                       model_work=AUDIT_WORK if model_work is None else model_work,
                       lang=_audit_lang(lang, languages))
    return run(model, sections=("context", "tokens", "languages", "extension", "readiness", "repair"),
               given=Given(languages=[*langs, *corpora], corpora=corpora, data=list(data)), out=out, force=force,
               options=options, job=Job(command="audit", verbose=verbose, warnings=notes))


@api_function
def scan(model: str, *, corpora: Paths = (), out: Out = None, force: bool = False, verbose: bool | None = None,
         device: str = "auto", download: str = "ranges", trust_pickle: bool = False,
         scan: bool = True, k: int = 10, knn_method: str = "auto", map: bool = True, threshold: float = 4.0,
         unused_ids: Sequence[int] | None = None, verify: int | None = 0, verify_sample: str = "top",
         verify_work: float | None = None, cache_dir: str | Path | None = None,
         repair_to: str | Path | None = None, repair_init: str = "subword-mean",
         text_field: str = "text", limits: Sequence[str] = ()) -> RunResult:
    """Under-trained and isolated rows: indicators, kNN graph, 2-D map (the tokens section).

    Args:
        model: model spec.
        corpora: the user's data: the scan lists which flagged rows its text (and the model's chat
            template) produces; ``repair_to`` then writes the model with those rows re-initialised.
        out: the folder to write (``DEFAULT_OUT``: ``reports/<name>-<UTC time>``); None writes nothing
            (default ``None``).
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        download: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full``
            (whole shards) (default ``"ranges"``; one of ranges, full).
        trust_pickle: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``) (default
            ``False``).
        scan: run the geometry scan (indicators, kNN graph) inside the tokens section (default ``True``).
        k: nearest neighbours per row in the kNN graph (default ``10``).
        knn_method: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn) (default
            ``"auto"``; one of auto, exact, certified, hnsw, nndescent).
        map: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on large
            vocabularies) (default ``True``).
        threshold: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row
            is flagged (see embscope.geometry.indicators) (default ``4.0``).
        unused_ids: token ids known to be unused (the Magikarp reference set); null finds them automatically
            (default ``None``).
        verify: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
            null: automatic (``audit``): a random sample when the whole weights fit the memory budget (default
            ``0``).
        verify_sample: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of
            all flags) (default ``"top"``; one of top, random).
        verify_work: the prompting's work budget, 10¹² multiply-adds (tokens × parameters; null: the automatic
            run's 30, else none): rows beyond it stay unchecked, so the same rows are checked at any load
            (default ``None``).
        cache_dir: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``) (default
            ``None``).
        repair_to: also write the model with the flagged rows the data uses re-initialised, to this folder
            (default ``None``).
        repair_init: initialisation of the repaired rows: ``NAME`` or ``INPUT/OUTPUT`` (default
            ``"subword-mean"``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
    Example:
        >>> res = scan("minilm-l6", map=False, knn_method="auto")  # exact or certified, never approximate
        >>> res.summary.sections.tokens.geometry.knn.method
        'exact'
    """
    return run(model, sections=("tokens", "repair"), given=Given(corpora=corpora), out=out, force=force,
               options=_options(locals()), job=Job(command="scan", kind="scan", verbose=verbose, required=["tokens"]))


@api_function
def check(model: str, data: str | Path | Paths, *, out: Out = None, force: bool = False,
          verbose: bool | None = None,
          device: str = "auto", download: str = "ranges", trust_pickle: bool = False,
          scan: bool = True, k: int = 10, knn_method: str = "auto", map: bool = False, threshold: float = 4.0,
          unused_ids: Sequence[int] | None = None, verify: int | None = 0, verify_sample: str = "top",
          verify_work: float | None = None, cache_dir: str | Path | None = None,
          repair_to: str | Path | None = None, repair_init: str = "subword-mean",
          engine: str = "local", workers: int | None = None, ray_address: str | None = None,
          text_field: str = "text", limits: Sequence[str] = (),
          data_format: str | None = None, max_length: int | None = None, chat_template: str | Path | None = None,
          trainer: str = "trl", pad_token: str | None = None, split: str | None = None,
          lf_template: str | None = None, train_on_prompt: bool = False, mask_history: bool = False,
          gguf_tokenizer: str = "llamacpp", responses_only: bool = False, instruction_part: str | None = None,
          response_part: str | None = None) -> RunResult:
    """Ready to fine-tune? Read ``data`` as the trainer will and report every vocabulary hazard.

    The data is rendered with the model's chat template and tokenized exactly as
    ``apply_chat_template`` does (plain texts as ``tokenizer(text)``), and labelled as the trainer
    labels it (:mod:`embscope.readiness.trainers`); the findings carry stable codes
    (:mod:`embscope.readiness.findings`). Reads only the matrices, config and tokenizer; the map is
    off by default (``map=True`` draws it).

    Args:
        model: model spec.
        data: training data: files, folders or globs of jsonl/json/Parquet/Arrow records in the
            ``messages``, ShareGPT, Alpaca, prompt/completion, preference, KTO or ``text`` format.
        out: the folder to write (summary.json, tokens.parquet, findings.parquet, index.html); None
            (default) writes nothing.
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        download: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full``
            (whole shards) (default ``"ranges"``; one of ranges, full).
        trust_pickle: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``) (default
            ``False``).
        scan: run the geometry scan (indicators, kNN graph) inside the tokens section (default ``True``).
        k: nearest neighbours per row in the kNN graph (default ``10``).
        knn_method: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn) (default
            ``"auto"``; one of auto, exact, certified, hnsw, nndescent).
        map: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on large
            vocabularies) (default ``False``).
        threshold: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row
            is flagged (see embscope.geometry.indicators) (default ``4.0``).
        unused_ids: token ids known to be unused (the Magikarp reference set); null finds them automatically
            (default ``None``).
        verify: check N flagged rows (and up to 100 trained controls) by prompting the whole model; 0: off;
            null: automatic (``audit``): a random sample when the whole weights fit the memory budget (default
            ``0``).
        verify_sample: which flagged rows ``verify`` checks: top (highest scores) or random (seeded sample of
            all flags) (default ``"top"``; one of top, random).
        verify_work: the prompting's work budget, 10¹² multiply-adds (tokens × parameters; null: the automatic
            run's 30, else none): rows beyond it stay unchecked, so the same rows are checked at any load
            (default ``None``).
        cache_dir: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``) (default
            ``None``).
        repair_to: also write the model with the flagged rows the data uses re-initialised, to this folder
            (default ``None``).
        repair_init: initialisation of the repaired rows: ``NAME`` or ``INPUT/OUTPUT`` (default
            ``"subword-mean"``).
        engine: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a
            cluster) (default ``"local"``; one of local, ray).
        workers: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local
            Ray (default ``None``).
        ray_address: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
            (default ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
        data_format: training-data record format for the check (null: detected per record) (default ``None``;
            one of preference, kto, messages, sharegpt, prompt-completion, alpaca, text).
        max_length: the trainer's sequence length, tokens (null: the config's context) (default ``None``).
        chat_template: a chat template file (.jinja) to render the training data with (null: the model's own)
            (default ``None``).
        trainer: the trainer whose ids, labels and loss mask the check follows (embscope.readiness.trainers)
            (default ``"trl"``; one of trl, transformers, unsloth, axolotl, llamafactory).
        pad_token: the pad token the user will set (null: the trainer's own choice) (default ``None``).
        split: check only this split of data with several (null: each split, reported on its own) (default
            ``None``).
        lf_template: LLaMA-Factory's ``template`` (``--trainer llamafactory``; null: read off the model's chat
            template, as LLaMA-Factory does when it is unset) (default ``None``).
        train_on_prompt: LLaMA-Factory's ``train_on_prompt``: the prompts in the loss too (default ``False``).
        mask_history: LLaMA-Factory's ``mask_history``: only the last response in the loss (default
            ``False``).
        gguf_tokenizer: a GGUF model's tokenizer for the check: ``llamacpp`` (as llama.cpp splits) or
            ``transformers`` (transformers' GGUF conversion: what a TRL or transformers script loading the
            GGUF gets) (default ``"llamacpp"``; one of llamacpp, transformers).
        responses_only: Unsloth's ``train_on_responses_only`` (``--trainer unsloth``): only the assistant
            responses in the loss (default ``False``).
        instruction_part: its ``instruction_part``, the text that opens a user turn (null: read off the chat
            template) (default ``None``).
        response_part: its ``response_part``, the text that opens an assistant turn (null: read off the chat
            template) (default ``None``).
    Returns:
        :class:`~embscope.runner.RunResult`; the findings are ``res.summary.sections.readiness.findings``,
        one row each in ``res.tables["findings"]``.
    Example:
        >>> res = check("smollm2-135m", "corpora/chat/medical-chat.jsonl", scan=False)
        >>> sorted({f.code for f in res.summary.sections.readiness.findings})
        ['exceeds-context', 'pad-is-eos']
    """
    # long: the docstring documents each of its parameters
    return run(model, sections=("tokens", "readiness", "repair"), given=Given(data=_paths(data)), out=out,
               force=force, options=_options(locals()),
               job=Job(command="check", kind="check", verbose=verbose, required=["readiness"]))


@api_function
def diff(base: str, tuned: str | Path, *, data: str | Path | Paths = (), manifest: str | Path | None = None,
         languages: str | Path | None = DEFAULT_LANGUAGES, tokens: str | Path | None = None, out: Out = None,
         force: bool = False, verbose: bool | None = None,
         device: str = "auto", download: str = "ranges", trust_pickle: bool = False,
         scan: bool = True, k: int = 10, knn_method: str = "auto", map: bool = False, threshold: float = 4.0,
         unused_ids: Sequence[int] | None = None, cache_dir: str | Path | None = None,
         text_field: str = "text", limits: Sequence[str] = (), data_format: str | None = None,
         lang: Sequence[str] = ()) -> RunResult:
    """After the fine-tune: which token rows training moved, whether new tokens learnt, what broke.

    BASE and TUNED are any model spec (TUNED may be a PEFT adapter folder on BASE); only their
    embeddings and heads are read (:mod:`embscope.changes`).

    Args:
        base: the model training started from.
        tuned: the fine-tuned model, or a PEFT adapter folder.
        data: the training data (any format :func:`check` reads): the rows it uses; with it BASE is
            scanned (``scan=False`` to skip) for ``untrained-still``.
        manifest: ``extend --apply``'s manifest (or its folder): the initial rows of the added
            tokens (default: one found in BASE's folder, TUNED's, or next to them, whose terms are
            TUNED's tokens and whose initial rows are intact; else BASE's mean row).
        languages: the multilingual corpus for per-language drift (default the shipped ``udhr``;
            ``None``/``"none"`` for none); ``lang`` selects its languages, by default ``set:audit``
            on the shipped UDHR.
        tokens: a ``tokens.parquet`` of an earlier scan of BASE: its ``flagged`` rows instead of a scan.
        out: the folder to write (summary.json, diff.parquet, index.html); None (default) writes nothing.
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        download: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full``
            (whole shards) (default ``"ranges"``; one of ranges, full).
        trust_pickle: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``) (default
            ``False``).
        scan: run the geometry scan (indicators, kNN graph) inside the tokens section (default ``True``).
        k: nearest neighbours per row in the kNN graph (default ``10``).
        knn_method: kNN method (:data:`embscope.geometry.knn_record.METHODS`; embscope.geometry.knn) (default
            ``"auto"``; one of auto, exact, certified, hnsw, nndescent).
        map: draw the 2-D UMAP map of the kNN graph (``--no-map``: off; the slowest part of the scan on large
            vocabularies) (default ``False``).
        threshold: ``undertrained_score`` (robust sigmas of the strongest indicator) at or above which a row
            is flagged (see embscope.geometry.indicators) (default ``4.0``).
        unused_ids: token ids known to be unused (the Magikarp reference set); null finds them automatically
            (default ``None``).
        cache_dir: folder for the kNN cache (null: ``$EMBSCOPE_CACHE`` or ``~/.cache/embscope``) (default
            ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
        data_format: training-data record format for the check (null: detected per record) (default ``None``;
            one of preference, kto, messages, sharegpt, prompt-completion, alpaca, text).
        lang: languages measured (empty: every language): codes, ``script:XXXX`` (ISO 15924), ``family:NAME``
            (Glottolog) or ``set:audit``; the reference is always measured (docs/languages.md) (default
            ``()``).
    Returns:
        :class:`~embscope.runner.RunResult`; the record is ``res.summary.sections.diff`` (findings,
        per-matrix floors and counts), the per-row table ``res.tables["diff"]``.
    Example:
        >>> res = diff("smollm2-135m", "smollm2-135m", languages=None)
        >>> res.summary.sections.diff.matrices["input"].moved, [f.code for f in res.summary.sections.diff.findings]
        (0, ['nothing-moved'])
    """
    from embscope.output import check_target

    paths = _paths(data)
    if out is not None and out is not DEFAULT_OUT:  # never write over TUNED or the manifest's folder
        check_target(out, force=force, inputs=[p for p in (Path(tuned), Path(manifest) if manifest else None)
                                               if p is not None and p.exists()])
    langs, notes = _languages(languages, "languages=")
    table = read_tokens_table(tokens) if tokens is not None else None
    options = _options(locals(), tuned=str(tuned), manifest=str(manifest) if manifest is not None else None,
                       lang=_audit_lang(lang, languages))
    sections = ("tokens", "diff") if paths and scan and table is None else ("diff",)
    return run(base, sections=sections, given=Given(languages=langs, data=paths, tokens=table), out=out, force=force,
               options=options,
               job=Job(command="diff", kind="diff", verbose=verbose, required=["diff"], warnings=notes))


@api_function
def fertility(tokenizer: str | None, corpus: str | Path = DEFAULT_LANGUAGES, *, out: Out = None, force: bool = False,
              verbose: bool | None = None, reference: str = "eng", sample_bytes: int | None = None,
              engine: str = "local", workers: int | None = None, ray_address: str | None = None,
              text_field: str = "text", lang_field: str = "lang", limits: Sequence[str] = (),
              renyi_alpha: float = 2.5, weights: str | Path | None = None, resamples: int = 1000, seed: int = 0,
              level: float = 0.95,
              model: str | None = None, model_work: float | None = None, device: str = "auto",
              unit_field: str = "unit", lang: Sequence[str] = ()) -> RunResult:
    """Per-language fertility, parity and friends for one tokenizer (the languages section).

    Args:
        tokenizer: tokenizer spec (``gpt2``, ``cl100k_base``, a tokenizer file or a model spec);
            None with ``model``: the model's own.
        corpus: a parallel multilingual corpus (default the shipped ``udhr``, every language of
            it; ``lang`` selects some: ``["hin", "script:Taml", "family:Dravidian"]``), or a local
            FLORES+ / FLORES-200 folder, read in place.
        renyi_alpha: the order α of ``renyi_efficiency``; weights: a data mix's shares (JSON or TSV,
            :mod:`embscope.languages.weights`); resamples, seed, level: the bootstrap intervals'.
        model: a model spec: its own tokenizer is measured first, and the whole model scores the
            aligned text of a few languages (``bits_per_byte``, ``bits_per_byte_se``,
            ``information_parity``: :mod:`embscope.languages.model_cost`) within ``model_work``.
        out: the folder to write (``DEFAULT_OUT``: ``reports/<name>-<UTC time>``); None writes nothing
            (default ``None``).
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        reference: reference language for parity (default ``"eng"``).
        sample_bytes: cap on corpus bytes read per language (null: all) (default ``None``).
        engine: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a
            cluster) (default ``"local"``; one of local, ray).
        workers: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local
            Ray (default ``None``).
        ray_address: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
            (default ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        lang_field: the language field of records (an empty string: never read a language from records)
            (default ``"lang"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
        weights: a data mix's language shares (JSON object or TSV code → share) for
            tokenizers.mix_tokens_per_unit (default ``None``).
        resamples: bootstrap resamples of every interval over aligned units (default ``1000``).
        seed: the bootstrap's seed (default ``0``).
        level: the intervals' coverage (default ``0.95``).
        model_work: the work the model may do scoring each language's aligned text (``bits_per_byte``,
            ``information_parity``), 10¹² multiply-adds (tokens × parameters, known before it runs; units past
            it are left out in every language; null: 20 in ``fertility --model``, 0.5 in ``audit``; 0: off)
            (default ``None``).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        unit_field: the field of records (jsonl key, Parquet/Arrow column) that aligns them across languages
            (parity compares the units two languages share); a FLORES table without it aligns by ``id``
            (default ``"unit"``).
        lang: languages measured (empty: every language): codes, ``script:XXXX`` (ISO 15924), ``family:NAME``
            (Glottolog) or ``set:audit``; the reference is always measured (docs/languages.md) (default
            ``()``).
    Example:
        >>> res = fertility("gpt2", "udhr", lang=["script:Deva"])  # and the reference, eng
        >>> t = res.tables["languages"]
        >>> t.filter(t["language"] == "eng")["parity"].to_list()
        [1.0]
    """
    from embscope.errors import SpecError

    if tokenizer is None and model is None:
        raise SpecError("fertility needs a tokenizer or a model: pass --tokenizer NAME or --model M")
    tokenizers = [tokenizer] if tokenizer is not None and tokenizer != model else []
    return _languages_run(tokenizers, corpus, out, force, verbose, _options(locals()), model=model)


@api_function
def compare(tokenizers: Sequence[str], corpus: str | Path = DEFAULT_LANGUAGES, *, out: Out = None,
            force: bool = False, verbose: bool | None = None, reference: str = "eng",
            sample_bytes: int | None = None, engine: str = "local", workers: int | None = None,
            ray_address: str | None = None, text_field: str = "text", lang_field: str = "lang",
            limits: Sequence[str] = (), renyi_alpha: float = 2.5, weights: str | Path | None = None,
            resamples: int = 1000, seed: int = 0, level: float = 0.95, unit_field: str = "unit",
            lang: Sequence[str] = ()) -> RunResult:
    """The same as :func:`fertility` for several tokenizers, side by side, with a verdict per language
    and pair of tokenizers (``comparisons`` table: :mod:`embscope.languages.comparison`).

    Args:
        tokenizers: tokenizer specs; the first one orders the table.
        corpus: a parallel multilingual corpus: a path or a shipped name (default the shipped ``udhr``)
            (default ``DEFAULT_LANGUAGES``).
        out: the folder to write (``DEFAULT_OUT``: ``reports/<name>-<UTC time>``); None writes nothing
            (default ``None``).
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        reference: reference language for parity (default ``"eng"``).
        sample_bytes: cap on corpus bytes read per language (null: all) (default ``None``).
        engine: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a
            cluster) (default ``"local"``; one of local, ray).
        workers: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local
            Ray (default ``None``).
        ray_address: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
            (default ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        lang_field: the language field of records (an empty string: never read a language from records)
            (default ``"lang"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
        renyi_alpha: the order α of renyi_efficiency (Zouhar et al. 2023: 2.5) (default ``2.5``).
        weights: a data mix's language shares (JSON object or TSV code → share) for
            tokenizers.mix_tokens_per_unit (default ``None``).
        resamples: bootstrap resamples of every interval over aligned units (default ``1000``).
        seed: the bootstrap's seed (default ``0``).
        level: the intervals' coverage (default ``0.95``).
        unit_field: the field of records (jsonl key, Parquet/Arrow column) that aligns them across languages
            (parity compares the units two languages share); a FLORES table without it aligns by ``id``
            (default ``"unit"``).
        lang: languages measured (empty: every language): codes, ``script:XXXX`` (ISO 15924), ``family:NAME``
            (Glottolog) or ``set:audit``; the reference is always measured (docs/languages.md) (default
            ``()``).
    Example:
        >>> compare(["gpt2", "cl100k_base"], "udhr", lang=["hin"]).summary.sections.languages.tokenizers
        ['gpt2', 'cl100k_base']
    """
    if len(list(tokenizers)) < 2:
        from embscope.errors import SpecError

        raise SpecError("compare needs at least two tokenizers (repeat --tokenizer); for one, run `embscope fertility`")
    return _languages_run(list(tokenizers), corpus, out, force, verbose, _options(locals()))


def _languages_run(tokenizers: list[str], corpus, out, force, verbose, options: RunOptions,
                   model: str | None = None) -> RunResult:
    return run(model, sections=("languages",), given=Given(languages=[corpus], tokenizers=tokenizers), out=out,
               force=force, options=options, job=Job(command="compare" if len(tokenizers) > 1 else "fertility",
                                                     kind="languages", verbose=verbose, required=["languages"]))


@api_function
def extend(model: str, corpus: str | Path, *, out: Out = None, force: bool = False,
           apply_to: str | Path | None = None, apply_init: str = "auto", rows_only: bool = False,
           tokens: str | Path | None = None, verbose: bool | None = None,
           top: int = 200, max_ngram: int = 1, min_freq: int = 5, init: Sequence[str] = ("auto",),
           diagnostics: bool = True, extend_as: str = "model", bpb_bytes: int | None = None,
           distil_work: float | None = None, method: str = "terms", rows: int | None = None,
           device: str = "auto", download: str = "ranges", trust_pickle: bool = False,
           sample_bytes: int | None = None, engine: str = "local", workers: int | None = None,
           ray_address: str | None = None, text_field: str = "text", lang_field: str = "lang",
           limits: Sequence[str] = (), target_lang: str | None = None,
           norm_correction: bool = False) -> tuple[RunResult, dict | None]:
    """Vocabulary-extension candidates from a domain corpus; with ``apply_to``, the extended model.

    Both output folders and ``apply_init`` are checked before any work, so a bad one fails at once;
    the manifest of ``apply_to`` is also ``res.summary.sections.apply``.

    Args:
        model: model spec.
        corpus: the domain corpus (a folder, a file, or a shipped name such as ``medical``).
        apply_to: also write the extended model (or, with ``rows_only`` or a model that does not
            load whole, its new rows) to this folder.
        rows_only: with ``apply_to``: write only the new rows.
        tokens: a ``tokens.parquet`` of an earlier scan: its ``flagged`` rows stay out of every mean.
        method: ``terms`` (the best words) or ``merges`` (continued BPE on the corpus, up to
            ``rows`` new tokens; the corpus may be a ``word<TAB>count`` list).
        rows: the most new tokens (rows), intermediates included; needed by ``merges``.
        target_lang: the target language (``--lang``; :mod:`embscope.extension.target`): its figures
            first, and ``auto`` picks on it.
        norm_correction: diagnose each strategy's per-script norm-corrected twin (``--norm-correction``).
        out: the folder to write (``DEFAULT_OUT``: ``reports/<name>-<UTC time>``); None writes nothing
            (default ``None``).
        force: replace an earlier embscope folder at ``out`` (never a folder embscope did not write) (default
            ``False``).
        apply_init: initialisation of the new rows ``apply_to`` writes: ``auto`` (the recommended strategy),
            ``NAME`` or ``INPUT/OUTPUT`` (default ``"auto"``).
        verbose: print every step and its time (None: the process's progress mode) (default ``None``).
        top: extension candidates to add (best estimated savings first) (default ``200``).
        max_ngram: longest multi-word extension term, in words (default ``1``).
        min_freq: least occurrences of an extension term (default ``5``).
        init: initialisation strategies to diagnose for extension candidates (``auto``: all, and recommend
            one) (default ``("auto",)``; one of auto, mean, hewitt, subword-mean, weighted-subword, knn-pull,
            subword-mean-norm, omp, distil, focus, random).
        diagnostics: load the whole model (when it fits) for the extension's KL and new-token-mass check
            (default ``True``).
        extend_as: how new tokens are written: ``model`` (BPE merges, Unigram pieces: the tokenizer's own
            terms) or ``added`` (HF added tokens, matched anywhere in the raw text) (default ``"model"``; one
            of model, added).
        bpb_bytes: held-out corpus bytes the extension's bits per byte reads (null: 24 KB in ``extend``, 4 KB
            in ``audit``, which also reads 5 KB of general text instead of all 10 KB) (default ``None``).
        distil_work: the work ``distil`` may do inside ``--init auto``, 10¹² multiply-adds (tokens ×
            parameters, known before it runs; null: 20 in ``extend``, 0 in ``audit``); a named ``--init
            distil`` always runs (default ``None``).
        device: auto, cpu or cuda (default ``"auto"``; one of auto, cpu, cuda).
        download: a hub model's weights: ``ranges`` (only the embedding/head tensors' bytes) or ``full``
            (whole shards) (default ``"ranges"``; one of ranges, full).
        trust_pickle: allow PyTorch pickle checkpoints (still loaded with ``weights_only=True``) (default
            ``False``).
        sample_bytes: cap on corpus bytes read per language (null: all) (default ``None``).
        engine: where corpus passes run: local (processes on this machine) or ray (Ray Data, local or a
            cluster) (default ``"local"``; one of local, ray).
        workers: local: worker processes (null: all cores for corpora of 32 MB or more); ray: CPUs of a local
            Ray (default ``None``).
        ray_address: an existing Ray cluster (null: $RAY_ADDRESS, else a local Ray started for the run)
            (default ``None``).
        text_field: the text field of .jsonl records and Parquet/Arrow columns (default ``"text"``).
        lang_field: the language field of records (an empty string: never read a language from records)
            (default ``"lang"``).
        limits: raised bounds, ``NAME=VALUE`` (``file-bytes=8G``); the rest keep their defaults
            (docs/limits.md) (default ``()``; one of file-bytes, corpus-bytes, ratio, languages, scan-bytes,
            top, max-ngram, hub-file-seconds, hub-run-seconds, hub-min-rate, gguf-metadata-bytes,
            tokenizer-bytes, merges).
    Returns:
        (the run's result, the ``apply_to`` manifest or ``None``).
    Example:
        >>> res, manifest = extend("smollm2-135m", "medical", top=5, init=["mean"], diagnostics=False,
        ...                        sample_bytes=200_000)  # 200 kB of the corpus
        >>> res.tables["candidates"].filter("added")["term"].to_list(), manifest
        ([' neoplasm', 'Malignant', ' unspecified', 'Benign', ' NOS'], None)
    """
    # long: the docstring documents each of its parameters
    table = read_tokens_table(tokens) if tokens is not None else None
    options = _options(locals(), apply_mode="rows" if rows_only else "auto")
    res = run(model, sections=("extension", "apply"), given=Given(domain=corpus, tokens=table), out=out, force=force,
              options=options,
              job=Job(command="extend", kind="extend", verbose=verbose, required=["extension", "apply"]))
    applied = res.outputs.get("apply")
    return res, applied.result if applied is not None else None


@checked
def rope(model: str):
    """The context summary of any model spec (reads the config only, no weights): RoPE reach,
    KV-cache bytes per token and per context, embedding share
    (:class:`~embscope.context.summary.ContextSummary`).

    Args:
        model: model spec (alias, hub id, folder, ``.gguf``): only its config is read.
    Example:
        >>> rope("smollm2-135m").kv_bytes_per_token  # 30 layers × 3 KV heads × 64 dims × (K, V) × 2 bytes
        23040
    """
    from embscope.context import context_summary
    from embscope.models.resolve import resolve_config

    return context_summary(resolve_config(model))


@checked
def export_atlas(report: str | Path, *, out: str | Path | None = None, force: bool = False) -> Path:
    """The token map of an output folder as Embedding Atlas reads it (:mod:`embscope.report.atlas`).

    Writes ``out/tokens.parquet`` (default ``out`` = ``report/atlas``); returns its path. Open it
    with :func:`embscope.report.atlas.atlas_command`'s command.

    Args:
        report: an output folder of ``audit`` or ``scan`` (its ``tokens.parquet``).
        out: the folder to write (default ``report/atlas``).
        force: replace an earlier embscope folder at ``out`` (default ``False``).
    """
    from embscope.output import claim
    from embscope.report.atlas import ATLAS_FILE, write_atlas

    report = Path(report)
    target = Path(out) if out is not None else report / "atlas"
    with claim(target, force=force, inputs=[report / "tokens.parquet"], kind="atlas") as tmp:
        write_atlas(report, tmp)
    return target / ATLAS_FILE


@checked
def export_projector(report: str | Path, *, out: str | Path | None = None, model: str | None = None,
                     sample: int = 10_000, force: bool = False, download: str = "ranges") -> dict[str, Any]:
    """The input embedding and the token metadata in the TensorBoard projector's formats
    (:mod:`embscope.report.projector`), for the model the output folder ``report`` was made from
    (``model`` overrides the spec in its ``summary.json``; the matrix must hash to the fingerprint
    recorded there). Returns ``{folder, rows, dim, files}``.

    Args:
        report: an output folder of ``audit`` or ``scan`` (its ``tokens.parquet`` and ``summary.json``).
        out: the folder to write (default ``report/projector``).
        model: the model spec to load the matrix from (default: the one ``summary.json`` names).
        sample: rows written: every flagged row plus a seeded draw of the rest (default ``10_000``; 0: all).
        force: replace an earlier embscope folder at ``out`` (default ``False``).
        download: a hub model's weights: ``ranges`` or ``full`` (default ``"ranges"``).
    """
    from embscope.errors import EmbscopeError, SpecError
    from embscope.formats.files import read_json
    from embscope.models.load import load_model
    from embscope.output import claim
    from embscope.provenance import tensor_digest
    from embscope.report.projector import write_projector
    from embscope.report.token_table import read_tokens

    report = Path(report)
    src = report / "tokens.parquet"
    if not src.is_file():
        raise SpecError(f"{report} has no tokens.parquet; pass a folder written by `embscope audit` or `scan`")
    try:  # read as every untrusted JSON is: size and nesting bounded (a bad one names no model)
        recorded = read_json(report / "summary.json", what="summary")["inputs"]["model"]
    except (OSError, KeyError, TypeError, EmbscopeError):
        recorded = None
    spec = model or (recorded or {}).get("spec")
    if not spec:
        raise SpecError(f"{report}/summary.json names no model; pass --model")
    target = Path(out) if out is not None else report / "projector"
    tokens = read_tokens(src)
    m = load_model(spec, device="cpu", download=download)
    want = ((recorded or {}).get("tensors") or {}).get("embed")
    if want and tensor_digest(m.embed) != want:
        raise SpecError(f"the embedding of {spec} is not the one {report} was made from (its fingerprint "
                        "differs from summary.json); pass the model it was made from with --model")
    with claim(target, force=force, inputs=[src], kind="projector") as tmp:
        info = write_projector(tokens, m.embed, tmp, name=m.name, sample=sample)
    return {"folder": target, **info}


@checked
def read_tokens_table(path: str | Path):
    """A ``tokens.parquet`` of an earlier run (its ``flagged`` rows stay out of the extension's
    means); a file that is not Parquet is a one-line :class:`~embscope.errors.SpecError`.

    Args:
        path: the ``tokens.parquet`` file.
    """
    import polars as pl

    from embscope.errors import SpecError
    from embscope.formats.files import check_regular

    path = Path(path)
    check_regular(path, what="tokens table")
    try:
        table = pl.read_parquet(path)
    except Exception as exc:  # noqa: BLE001 - polars raises many kinds for a damaged file
        raise SpecError(f"--tokens {path.name} is not a readable Parquet file ({type(exc).__name__}); "
                        "pass the tokens.parquet of an earlier scan or audit") from None
    return table
