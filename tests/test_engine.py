"""Engines: one process, local worker processes and Ray give the same numbers, exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from embscope.extension import candidates as C
from embscope.extension.savings import corpus_savings
from embscope.corpus import engine as E
from embscope.corpus import shards as shards_module
from embscope.corpus.engine import Engine, EngineError
from embscope.languages.fertility import CorpusPass, measure
from tests.corpus_copies import sharded_copy

ROOT = Path(__file__).resolve().parent.parent
UDHR = ROOT / "corpora" / "udhr"
MEDICAL = ROOT / "corpora" / "medical"


@pytest.fixture(scope="module")
def gpt2():
    from embscope.models.vocabulary import load_vocabulary

    return load_vocabulary("gpt2")


@pytest.fixture(scope="module")
def llama3():
    from embscope.models.vocabulary import load_vocabulary

    return load_vocabulary("llama3").tok


@pytest.fixture(scope="module")
def udhr68(tmp_path_factory):
    """The shipped UDHR's 68 first languages (audit's set): the engines' equality needs no more,
    and the whole 512-variety corpus would cost seven times the time."""
    from embscope.languages.selection import AUDIT_LANGUAGES

    d = tmp_path_factory.mktemp("udhr68")
    for lang in AUDIT_LANGUAGES:
        (d / f"{lang}.jsonl").write_bytes((UDHR / f"{lang}.jsonl").read_bytes())
    return d


#: records of the medical corpus's ICD-10-CM file in :func:`medical_part` (a fifth of them)
ICD_RECORDS = 5000


@pytest.fixture(scope="module")
def medical_part(tmp_path_factory) -> Path:
    """The medical corpus cut to ~0.57 MB: its abbreviations file whole and the first
    :data:`ICD_RECORDS` records of its ICD-10-CM file. Two files of one language, as the whole
    corpus: the engines' equality needs no more (over a thousand candidates, every spill and
    merge forced below), and the whole 1.9 MB would cost three times the time in every pass."""
    d = tmp_path_factory.mktemp("medical") / "medical"
    d.mkdir()
    (d / "abbreviations.jsonl").write_bytes((MEDICAL / "abbreviations.jsonl").read_bytes())
    lines = (MEDICAL / "icd10cm.jsonl").read_text("utf-8").splitlines(keepends=True)
    (d / "icd10cm.jsonl").write_text("".join(lines[:ICD_RECORDS]), "utf-8")
    return d


def texts_in(folder: Path) -> int:
    """Records (non-blank lines) of a folder of JSONL files: what a pass must count as read."""
    return sum(1 for f in folder.glob("*.jsonl") for line in f.read_text("utf-8").splitlines() if line.strip())


@pytest.fixture(scope="module")
def medical_shards(tmp_path_factory, medical_part):
    """A sharded, compressed copy of :func:`medical_part` (gz, zst, bz2, Parquet, HF dataset
    folders), written once for the tests that read it (none writes into it)."""
    return sharded_copy(medical_part, tmp_path_factory.mktemp("shards") / "medical")


@pytest.fixture(scope="module")
def udhr_one(gpt2, udhr68):
    return measure([gpt2], udhr68, read=CorpusPass(engine=Engine(workers=1)))


@pytest.fixture(scope="module")
def medical_ref(llama3, medical_part):
    """find_candidates over the texts in memory: the single-process reference."""
    from embscope.corpus.stream import read_texts

    return C.find_candidates(llama3, read_texts(medical_part), max_ngram=2, min_freq=5)


@pytest.fixture(scope="module")
def extend_one(smollm2_model, medical_part):
    """suggest on the medical corpus in this process: the single-process reference."""
    from embscope.extension import ExtensionOptions, suggest

    return suggest(smollm2_model, medical_part, ExtensionOptions(top=20, max_ngram=2, diagnostics=False),
                   engine=Engine(workers=1))


def same_extension(a, b):
    """Same candidates (terms, counts, pieces, order), same tokens before and after."""
    assert a.table.equals(b.table) and a.table.height > 500
    assert a.terms == b.terms and a.pieces == b.pieces
    assert np.array_equal(a.piece_counts, b.piece_counts)
    keys = ("corpus_texts", "candidates", "corpus_tokens", "corpus_tokens_after", "tokens_saved",
            "estimated_savings")
    assert {k: getattr(a.summary, k) for k in keys} == {k: getattr(b.summary, k) for k in keys}
    assert a.summary.tokens_saved > 0


def same_fertility(a, b):
    assert a.table.equals(b.table)
    assert a.token_counts.keys() == b.token_counts.keys()
    for k in a.token_counts:
        assert np.array_equal(a.token_counts[k], b.token_counts[k]), k


def test_engine_options_are_checked():
    with pytest.raises(EngineError, match="unknown engine"):
        Engine("spark")
    with pytest.raises(EngineError, match="at least 1"):
        Engine(workers=0)
    with pytest.raises(EngineError, match="needs --engine ray"):
        Engine("local", ray_address="auto")


@pytest.mark.slow
def test_fertility_local_workers_equal_one_process(gpt2, udhr_one, udhr68, tmp_path):
    two = measure([gpt2], udhr68, read=CorpusPass(engine=Engine(workers=2)))
    same_fertility(udhr_one, two)
    assert two.summary.corpus == udhr_one.summary.corpus
    # a sharded copy (gz, zst, bz2, Parquet, HF dataset folders) gives the same table
    copy = sharded_copy(udhr68, tmp_path / "udhr")
    sharded = measure([gpt2], copy, read=CorpusPass(engine=Engine(workers=2)))
    same_fertility(udhr_one, sharded)
    assert sharded.summary.corpus.files_read == 3 * udhr_one.summary.corpus.files_read


def test_sampled_pass_is_the_same_on_workers(gpt2, udhr68):
    one = measure([gpt2], udhr68, read=CorpusPass(sample_bytes=3000, engine=Engine(workers=1)))
    two = measure([gpt2], udhr68, read=CorpusPass(sample_bytes=3000, engine=Engine(workers=2)))
    same_fertility(one, two)
    assert one.table["bytes"].max() <= 3000


def test_interleaved_languages_count_as_separate_files(gpt2, tmp_path, monkeypatch):
    """A jsonl whose records switch language every line (batches of one text) gives exactly the
    rows of the same records read one language per file: sums, round-trips, word and script
    samples (cut inside each language here), parity over the units."""
    import itertools
    import json

    from embscope.languages import counting as F

    monkeypatch.setattr(F, "WORD_SAMPLE_BYTES", 3000)
    monkeypatch.setattr(F, "SCRIPT_SAMPLE_CHARS", 700)
    langs = ["eng", "fra", "jpn", "tha", "amh"]
    recs = {lang: [json.loads(line) for line in (UDHR / f"{lang}.jsonl").read_text("utf-8").splitlines()]
            for lang in langs}
    (tmp_path / "apart").mkdir()
    for lang in langs:
        (tmp_path / "apart" / f"{lang}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs[lang]), "utf-8")
    mixed = [r for row in itertools.zip_longest(*recs.values()) for r in row if r is not None]
    (tmp_path / "mixed.jsonl").write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in mixed), "utf-8")
    apart = measure([gpt2], tmp_path / "apart", read=CorpusPass(engine=Engine(workers=1)))
    together = measure([gpt2], tmp_path / "mixed.jsonl", read=CorpusPass(engine=Engine(workers=1)))
    assert sorted(together.table["language"]) == sorted(langs)
    same_fertility(apart, together)
    assert together.table.filter(language="fra")["parity"][0] > 1.0


def test_merge_replays_order_dependent_samples(gpt2):
    """Merging partials of consecutive batches = counting them in one go (round-trips, samples)."""
    from embscope.languages import counting as F
    from embscope.corpus.stream import iter_corpus

    batches = list(iter_corpus(UDHR / "eng.jsonl", batch_size=2))
    whole = F.count_batches([gpt2], batches)
    merged = F.count_batches([gpt2], batches[:5])
    for i in range(5, len(batches), 3):
        merged = F.merge_counts(merged, F.count_batches([gpt2], batches[i:i + 3]))
    a, b = whole.acc[(0, "eng")], merged.acc[(0, "eng")]
    assert (a.texts, a.tokens, a.rt, a.units) == (b.texts, b.tokens, b.rt, b.units)
    assert whole.langs["eng"].word_freq == merged.langs["eng"].word_freq
    monkey = F.WORD_SAMPLE_BYTES
    try:  # a word sample that stops inside the corpus is replayed at the same batch
        F.WORD_SAMPLE_BYTES = 1500
        whole = F.count_batches([gpt2], batches)
        parts = [F.count_batches([gpt2], batches[i:i + 4]) for i in range(0, len(batches), 4)]
        merged = parts[0]
        for p in parts[1:]:
            merged = F.merge_counts(merged, p)
        assert whole.langs["eng"].word_texts == merged.langs["eng"].word_texts
        assert whole.langs["eng"].script_texts == merged.langs["eng"].script_texts
        assert whole.langs["eng"].word_chars < sum(len(t) for b in batches for t in b.texts)
    finally:
        F.WORD_SAMPLE_BYTES = monkey


@pytest.mark.slow
def test_candidates_spill_and_merge_exactly(llama3, medical_ref, medical_part, tmp_path, monkeypatch):
    monkeypatch.setattr(E, "MERGE_FAN_IN", 3)  # force merge rounds
    got, report = C.corpus_candidates(llama3, medical_part, max_ngram=2, min_freq=5,
                                      engine=Engine(workers=2), chunk_terms=2000)
    assert got == medical_ref and len(got) > 1000
    assert report.texts == texts_in(medical_part)
    saved = corpus_savings(llama3, llama3, medical_part, engine=Engine(workers=2))
    total, counts = saved.before, saved.counts
    from embscope.corpus.stream import read_texts

    ref_total, ref_counts = C.token_counts(llama3, read_texts(medical_part))
    assert total == ref_total and np.array_equal(counts, ref_counts)


@pytest.mark.slow
def test_extend_on_workers_equals_one_process(smollm2_model, extend_one, medical_part, medical_shards):
    from embscope.extension import ExtensionOptions, suggest

    one = extend_one.summary
    assert (one.engine.kind, one.engine.workers) == ("local", 1) and one.corpus_report.files_read == 2
    two = suggest(smollm2_model, medical_part, ExtensionOptions(top=20, max_ngram=2, diagnostics=False),
                  engine=Engine(workers=2))
    same_extension(extend_one, two)
    assert two.summary.corpus_report == one.corpus_report
    # a sharded, compressed copy (gz, zst, bz2, Parquet, HF dataset folders): the same extension
    sharded = suggest(smollm2_model, medical_shards, ExtensionOptions(top=20, max_ngram=2, diagnostics=False),
                      engine=Engine(workers=2))
    same_extension(extend_one, sharded)
    assert sharded.summary.corpus_report.files_read == 6


def test_extend_sample_is_the_same_on_workers(smollm2_model, monkeypatch):
    from embscope.extension import ExtensionOptions, suggest

    monkeypatch.setattr(shards_module, "UNIT_BYTES", 100_000)  # the sample goes out in several pieces
    kw = dict(options=ExtensionOptions(top=20, diagnostics=False), sample_bytes=600_000)
    one = suggest(smollm2_model, MEDICAL, engine=Engine(workers=1), **kw)
    two = suggest(smollm2_model, MEDICAL, engine=Engine(workers=2), **kw)
    same_extension(one, two)
    report = one.summary.corpus_report
    assert report.capped_languages == ["eng"] and report.bytes <= 600_000


# ------------------------------------------------------------------ Ray (a local Ray, 2 CPUs)


# ``ray_local`` (tests/conftest.py): one local Ray per test process, shared with tests/test_check_codes.py


@pytest.mark.slow
def test_ray_fertility_equals_local(gpt2, udhr_one, udhr68, ray_local):
    on_ray = measure([gpt2], udhr68, read=CorpusPass(engine=ray_local))
    same_fertility(udhr_one, on_ray)
    assert on_ray.summary.corpus == udhr_one.summary.corpus
    assert on_ray.summary.engine.kind == "ray"


@pytest.mark.slow
def test_ray_candidates_on_sharded_compressed_copy(llama3, medical_ref, medical_part, ray_local, medical_shards):
    copy = medical_shards
    got, report = C.corpus_candidates(llama3, copy, max_ngram=2, min_freq=5, engine=ray_local,
                                      chunk_terms=3000)
    assert got == medical_ref
    assert report.texts == texts_in(medical_part) and report.files_read == 6 and not report.skipped


@pytest.mark.slow
def test_ray_extend_on_sharded_compressed_copy(smollm2_model, extend_one, ray_local, medical_shards):
    from embscope.extension import ExtensionOptions, suggest

    copy = medical_shards
    on_ray = suggest(smollm2_model, copy, ExtensionOptions(top=20, max_ngram=2, diagnostics=False), engine=ray_local)
    same_extension(extend_one, on_ray)
    assert on_ray.summary.engine.kind == "ray"
    assert on_ray.summary.corpus_report.files_read == 6 and not on_ray.summary.corpus_report.skipped


#: /proc/net/tcp{,6} spellings of 127.0.0.1, ::ffff:127.0.0.1 and ::1
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def listening_addresses(port: int) -> list[str]:
    """Local addresses of the sockets listening on TCP ``port`` (Linux /proc, hex as written there)."""
    out = []
    for name in ("tcp", "tcp6"):
        table = Path("/proc/net") / name
        for line in (table.read_text().splitlines()[1:] if table.exists() else []):
            fields = line.split()
            addr, hexport = fields[1].split(":")
            if fields[3] == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                out.append(addr)
    return out


@pytest.mark.slow
def test_local_ray_listens_on_loopback_only(ray_local):
    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux /proc/net")
    from embscope.corpus.ray_engine import init

    ray = init(ray_local)
    host, gcs_port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
    node = ray.nodes()[0]
    assert host == node["NodeManagerAddress"] == "127.0.0.1"
    for port in (int(gcs_port), node["NodeManagerPort"], node["ObjectManagerPort"]):
        found = listening_addresses(port)
        assert found and set(found) <= LOOPBACK, (port, found)


@pytest.mark.parametrize("workers", [1, 2])
def test_corpus_pass_progress_is_bytes_with_a_total(gpt2, capsys, monkeypatch, workers):
    """A pass over the medical corpus (two files, one of 1.9 MB) reports bytes against the
    corpus's size on disk: in this process while the big file is read (many lines), on workers
    as each file's result comes back; it ends at the total, never past it."""
    import os
    import re

    from embscope import progress

    monkeypatch.delenv("EMBSCOPE_QUIET", raising=False)
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    measure([gpt2], MEDICAL, read=CorpusPass(engine=Engine(workers=workers)))
    total = sum(os.path.getsize(p) for p in MEDICAL.iterdir())
    lines = [l for l in capsys.readouterr().err.splitlines() if "tokenising corpus" in l]
    got = [re.search(r"tokenising corpus ([\d.,]+)/([\d.,]+) MiB \((\d+) %\)", l) for l in lines]
    assert all(got) and {g[2] for g in got} == {f"{total / 2**20:,.1f}"}
    assert [int(g[3]) for g in got] == sorted(int(g[3]) for g in got) and int(got[-1][3]) == 100
    assert len(got) > (20 if workers == 1 else 1)
