"""Sharded, compressed copies of the shipped corpora, in every format the readers take."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path

#: how shard j of a file is written, cycling: compressed jsonl, Parquet, an HF `save_to_disk` folder
KINDS = ("gz", "zst", "bz2", "parquet", "hf")


def write_hf_dataset(folder: Path, records: list[dict]) -> None:
    """What ``datasets.Dataset.save_to_disk`` writes: Arrow stream file + state.json + info."""
    import pyarrow as pa

    folder.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(records)
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        for rb in table.to_batches(max_chunksize=100):
            w.write_batch(rb)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": name}],
                                                   "_fingerprint": "0", "_split": "train"}))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
    # a leftover cache file of Dataset.map: must not be read
    with pa.OSFile(str(folder / "cache-123.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)


def write_shard(path_base: Path, kind: str, records: list[dict]) -> None:
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8")
    if kind == "gz":
        Path(f"{path_base}.jsonl.gz").write_bytes(gzip.compress(lines))
    elif kind == "bz2":
        Path(f"{path_base}.jsonl.bz2").write_bytes(bz2.compress(lines))
    elif kind == "zst":
        import zstandard

        Path(f"{path_base}.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    elif kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(records), f"{path_base}.parquet", row_group_size=500)
    else:
        write_hf_dataset(Path(path_base), records)


def sharded_copy(src: Path, dst: Path, parts: int = 3, kinds=KINDS) -> Path:
    """Each ``src/*.jsonl`` → ``dst/<stem>/<NN>.<kind>``: ``parts`` consecutive slices of its
    records, written in turn as the formats in ``kinds``. Records and their order are unchanged;
    the corpus's ``languages.json`` (its language names) is copied as it is."""
    names = src / "languages.json"
    if names.is_file():
        dst.mkdir(parents=True, exist_ok=True)
        (dst / names.name).write_bytes(names.read_bytes())
    k = 0
    for f in sorted(src.glob("*.jsonl")):
        records = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        out = dst / f.stem
        out.mkdir(parents=True, exist_ok=True)
        step = -(-len(records) // parts)
        for j in range(parts):
            chunk = records[j * step:(j + 1) * step]
            if chunk:
                write_shard(out / f"{j:02d}", kinds[k % len(kinds)], chunk)
                k += 1
    return dst
