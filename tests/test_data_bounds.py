"""Training-data records in every container within 1 MiB each, and ``.json`` arrays streamed.

Before: the 1 MiB per-record bound held for jsonl lines only; one 40 MB text record in a ``.json``
file went whole to the tokenizer (6.6 GB peak), a 240 MB ``.json`` of 12 M small records was
loaded whole (4.35 GB, 18 times the file), and Parquet/Arrow rows became Python objects a batch
at a time whatever their size. Memory is measured with ``tracemalloc`` (Python allocations: the
strings and objects a reader builds), on files a few MB large.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

MiB = 1 << 20


def _source(path: Path, fmt: str):
    from embscope.corpus.readers import SourceFile

    return SourceFile(str(path), str(path.parent), fmt, None)


def _read(path: Path, fmt: str = "json", check=None):
    """``(records, issues totals, peak bytes allocated while reading)``; with ``check``, each
    record is passed to it instead of kept (the peak is then the reader's own)."""
    from embscope.corpus.readers import FileIssues
    from embscope.corpus.records import json_objects, table_objects

    issues = FileIssues()
    reader = json_objects if fmt == "json" else table_objects
    records = []
    tracemalloc.start()
    try:
        for i, rec in enumerate(reader(_source(path, fmt), issues)):
            if check is None:
                records.append(rec)
            else:
                check(i, rec)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return records, dict(issues.totals), peak


def test_a_40_mb_record_in_a_json_file_is_skipped_unbuilt(tmp_path):
    path = tmp_path / "one.json"
    with open(path, "w", encoding="utf-8") as f:
        f.write('[{"text": "before"}, {"text": "' + "word " * (8 * MiB) + '"}, {"text": "after"}]')
    assert path.stat().st_size > 40 * MiB
    records, issues, peak = _read(path)
    assert records == [{"text": "before"}, {"text": "after"}]
    assert issues == {"json_records_over_1MiB": 1}
    assert peak < 12 * MiB, peak  # a window of the text, not the record


def test_a_json_array_of_small_records_is_streamed(tmp_path):
    """100,000 records (2.5 MB): what ``json.loads`` gives, in a fraction of its memory."""
    path = tmp_path / "many.json"
    n = 100_000
    path.write_text(json.dumps([{"text": f"row {i}", "n": i} for i in range(n)]), "utf-8")
    seen = [0]

    def check(i, rec):
        assert rec == {"text": f"row {i}", "n": i}
        seen[0] += 1

    _, issues, peak = _read(path, check=check)
    assert seen[0] == n and issues == {}
    tracemalloc.start()
    json.loads(path.read_bytes())
    _, whole = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 8 * MiB and peak * 3 < whole, (peak, whole)  # the window (~7 MB) whatever the file size


@pytest.mark.parametrize("doc, want", [
    ({"data": [{"text": "a"}, {"text": "b"}], "meta": {"n": 2}}, [{"text": "a"}, {"text": "b"}]),
    ({"meta": 1, "train": [{"text": "t"}], "data": [{"text": "d"}]}, [{"text": "t"}]),  # the first in the file
    ({"messages": [{"role": "user", "content": "hi"}]}, [{"messages": [{"role": "user", "content": "hi"}]}]),
])
def test_objects_holding_records_read_as_before(tmp_path, doc, want):
    for pad in (0, 2 * MiB):  # small enough to read whole, and streamed member by member
        path = tmp_path / f"doc{pad}.json"
        body = dict(doc, **({"padding": "x" * pad} if pad else {}))
        path.write_text(json.dumps(body), "utf-8")
        records, issues, _ = _read(path)
        if pad and "messages" in doc:  # the object is the record, and now past 1 MiB
            assert records == [] and issues == {"json_records_over_1MiB": 1}
        else:
            assert records == want and issues == {}


def test_invalid_json_keeps_the_records_before_it(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('[{"text": "a"}, {"text": "b"}, {"text": oops}]', "utf-8")
    records, issues, _ = _read(path)
    assert records == [{"text": "a"}, {"text": "b"}] and issues == {"invalid_json_files": 1}
    (tmp_path / "scalar.json").write_text('"just a string"', "utf-8")
    assert _read(tmp_path / "scalar.json")[:2] == ([], {"wrong_type_records": 1})


def test_chunk_boundaries_do_not_change_the_records():
    """Escapes, surrogate pairs, numbers and white space cut at every place a small chunk falls."""
    from embscope.formats.json_stream import OVERSIZED, iter_records

    recs = [{"t": 'q"\\\u00e9\U0001f600\n', "n": 12345678901234567890, "f": -2.5e-10, "l": [True, None, []]},
            "x" * 300, {"d": {"e": ["y" * 50]}}, 7]
    for text in (json.dumps(recs), json.dumps(recs, ensure_ascii=False, indent=1)):
        for chunk in (1, 2, 3, 5, 64):
            got = list(iter_records(io.BytesIO(text.encode()).read, max_record=200, chunk=chunk))
            assert got[1] is OVERSIZED
            assert [g for i, g in enumerate(got) if i != 1] == [r for i, r in enumerate(recs) if i != 1]


def _messages_table(n: int, big: int | None):
    import pyarrow as pa

    rows = [[{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
            for i in range(n)]
    if big is not None:
        rows[big][1]["content"] = "long " * (MiB // 2)  # 2.5 MB in one nested field
    return pa.table({"messages": rows, "id": list(range(n))})


@pytest.mark.parametrize("fmt", ["parquet", "arrow", "datasets"])
def test_table_rows_past_1_mib_are_skipped(tmp_path, fmt):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = _messages_table(500, big=3)
    if fmt == "parquet":
        path = tmp_path / "train.parquet"
        pq.write_table(table, path, row_group_size=200)
    else:  # an Arrow IPC stream, as datasets.save_to_disk writes it
        folder = tmp_path / ("ds" if fmt == "datasets" else "")
        folder.mkdir(exist_ok=True)
        path = folder / "data-00000-of-00001.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            for b in table.to_batches(max_chunksize=128):
                w.write_batch(b)
        if fmt == "datasets":
            (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": path.name}]}))
    records, issues, peak = _read(path, "parquet" if fmt == "parquet" else "arrow")
    assert issues == {"table_records_over_1MiB": 1}
    assert [r["id"] for r in records] == [i for i in range(500) if i != 3]
    assert records[3]["messages"][1] == {"role": "assistant", "content": "answer 4"}
    assert peak < 16 * MiB, peak


def test_row_bytes_count_every_nested_value():
    import pyarrow as pa

    from embscope.corpus.records import row_bytes

    table = pa.table({"m": [[{"r": "ab", "c": "xyz"}], None, []], "k": pa.array(["a", "bb", None]).dictionary_encode(),
                      "n": [1, 2, 3], "p": pa.array([{"a": 1}, {"a": 2}, {"a": 3}], pa.map_(pa.string(), pa.int64()))})
    sizes = row_bytes(table.to_batches()[0]).tolist()
    # m: 2 + 3 + 4 (the item's offset); k: 1 / 2 / 0; n: 8 each; p: key (1) + value (8) + 4
    assert sizes == [9 + 1 + 8 + 13, 0 + 2 + 8 + 13, 0 + 0 + 8 + 13]
