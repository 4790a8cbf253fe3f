"""A hostile hub: every range read ends in one line within the bounds of docs/limits.md, and a
failed read leaves nothing in the embscope cache.

The loopback hub of tests/test_hub_ranges.py, with its failure knobs (tests/hub_server.py):
bodies that stay empty, bytes that trickle, a header length of 1.5 GiB, GGUF metadata that never
ends, a ``Content-Encoding`` on a range. Deadlines are lowered with limits (``--limit`` or
``resolve(limits=...)``), so each case takes a few seconds; each runs in a thread with its own
join timeout, so a reader that hangs fails the test instead of hanging the suite.
"""

from __future__ import annotations

import struct
import threading
import time
from pathlib import Path

import pytest

from tests.test_hub_ranges import REPO, SHARDS, checkpoint, hub  # noqa: F401 - fixtures

#: a bound the reader must meet, with room for a loaded machine
SLACK = 20.0


def _bounded(fn, seconds: float = SLACK):
    """``fn()``'s exception (or None), failing the test when it is still running after ``seconds``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t0 = time.monotonic()
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still reading after {seconds:g} s")
    return out.get("error"), time.monotonic() - t0


def _resolve(*limits: str):
    from embscope.limits import parse_limits
    from embscope.models.resolve import resolve

    return lambda: resolve(REPO, limits=parse_limits(list(limits)))


def _left_in_cache(tmp_path: Path) -> list[str]:
    """Files (not folders) under the test's EMBSCOPE_CACHE, links included."""
    root = tmp_path / "embscope"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()) \
        if root.exists() else []


def _weight_gets(server) -> list:
    server.idle()  # a request the client gave up on may still be counting its bytes
    return [r for r in server.requests if r[0] == "GET" and r[1].endswith((".safetensors", ".gguf"))]


def _one_line(err) -> str:
    from embscope.errors import EmbscopeError

    assert isinstance(err, EmbscopeError), repr(err)
    msg = str(err)
    assert "\n" not in msg
    return msg


def test_empty_206_bodies_are_asked_for_a_few_times_only(hub, tmp_path):
    """Before: each empty ``206`` was asked again at once, forever (38,598 requests in 60 s)."""
    from embscope.models.hub_remote import MAX_STALLS

    hub.empty_ranges = True
    err, _ = _bounded(_resolve())
    msg = _one_line(err)
    assert f"{MAX_STALLS + 1} answers in a row brought no new byte" in msg and SHARDS[0] in msg
    assert len(_weight_gets(hub)) == MAX_STALLS + 1
    assert _left_in_cache(tmp_path) == []


@pytest.mark.parametrize("limit, name", [("hub-file-seconds=2", "hub-file-seconds"),
                                         ("hub-run-seconds=2", "hub-run-seconds")])
def test_a_trickling_server_meets_the_deadline(hub, tmp_path, limit, name):
    """Before: a byte every few tenths of a second restarted the read timeout, and the read went on
    (73 bytes in 150 s at one byte per 2 s, still running)."""
    hub.trickle = 0.2
    err, took = _bounded(_resolve(limit))
    msg = _one_line(err)
    assert f"passed the limit of 2 s" in msg and f"--limit {name}=4" in msg
    assert took < 2 + 5  # the deadline, plus one trickled byte and the HEADs
    assert _left_in_cache(tmp_path) == []


def test_a_slow_transfer_is_stopped_at_the_minimum_rate(hub, tmp_path, monkeypatch):
    monkeypatch.setattr("embscope.models.hub_remote.RATE_WINDOW", 0.5)
    hub.trickle = 0.02  # ~50 bytes/s
    err, took = _bounded(_resolve("hub-min-rate=1K"))
    msg = _one_line(err)
    assert "below the limit of 1,024 (hub-min-rate)" in msg and SHARDS[0] in msg
    assert took < 5
    assert _left_in_cache(tmp_path) == []


def test_scan_with_a_low_deadline_is_a_one_line_error(hub, tmp_path, capsys):
    """``--limit`` reaches the range reader through the command line."""
    from embscope.cli import main

    hub.trickle = 0.2
    code = main(["scan", "--model", REPO, "--no-map", "--device", "cpu", "--limit", "hub-file-seconds=1",
                 "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("error: reading model-00001-of-00003.safetensors of acme/tiny passed the limit of 1 s")
    assert not (tmp_path / "out").exists() and _left_in_cache(tmp_path) == []


@pytest.fixture
def hostile_repo(checkpoint, tmp_path):  # noqa: F811 - the imported fixture
    """The checkpoint's folder with its first shard replaced by ``make(path)``'s file (linked)."""
    folder, _ = checkpoint

    def build(make) -> Path:
        repo = tmp_path / "hostile"
        repo.mkdir()
        for f in folder.iterdir():
            if f.name != SHARDS[0]:
                (repo / f.name).symlink_to(f)
        make(repo / SHARDS[0])
        return repo

    return build


def test_a_header_claiming_1_5_gib_is_refused_before_it_is_read(hub, hostile_repo, tmp_path):
    """Before: 1.61 GB were read before the check, whose message named the wrong figures, and
    stayed in the cache."""
    from embscope.formats.safetensors import MAX_HEADER

    claim = 3 << 29  # 1.5 GiB

    def make(path: Path):
        with open(path, "wb") as fh:  # sparse: the file is as large as its claim, on no disk
            fh.write(struct.pack("<Q", claim) + b'{"a": ')
            fh.truncate(8 + claim + 4096)

    repo = hostile_repo(make)
    hub.repos[REPO] = repo
    hub.etags[repo / SHARDS[0]] = "0" * 64  # hashing 1.5 GiB of holes is not what this tests
    err, _ = _bounded(_resolve())
    msg = _one_line(err)
    assert f"claims a {claim:,}-byte header, more than the {MAX_HEADER:,} bytes" in msg
    assert sum(r[-1] for r in _weight_gets(hub)) <= 1 << 16  # the first request's 64 KiB, nothing more
    assert _left_in_cache(tmp_path) == []


def _gguf_strings(path: Path, count: int, each: int, size: int) -> None:
    """A GGUF v3 file whose one metadata entry is an array of ``count`` strings of ``each`` bytes
    (declared; their bytes are holes), the file ``size`` bytes long, sparse."""
    with open(path, "wb") as fh:
        key = b"tokenizer.ggml.tokens"
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, 1, 1) + struct.pack("<Q", len(key)) + key
                 + struct.pack("<IIQ", 9, 8, count))
        pos = fh.tell()
        for _ in range(count if each else 0):  # zero lengths are the holes themselves
            if pos + 8 > size:
                break
            fh.seek(pos)
            fh.write(struct.pack("<Q", each))
            pos += 8 + each
        fh.truncate(size)


@pytest.fixture
def gguf_repo(hub, tmp_path):
    def serve(count: int, each: int, size: int) -> str:
        folder = tmp_path / "gguf-repo"
        folder.mkdir()
        _gguf_strings(folder / "model.gguf", count, each, size)
        hub.repos["acme/endless"] = folder
        hub.commits["acme/endless"] = "e" * 40
        hub.etags[folder / "model.gguf"] = "1" * 64
        return "acme/endless/model.gguf"
    return serve


@pytest.mark.parametrize("count, each, limits, read", [
    (1 << 24, 0, [], 1 << 22),  # 16 Mi strings: at least 128 MiB by their lengths, past 64 MiB at once
    (48, 1 << 20, ["gguf-metadata-bytes=8M"], 8 << 20),  # 1 MiB strings: the prefix grows to the limit
])
def test_gguf_metadata_that_never_ends_stops_at_the_limit(gguf_repo, hub, tmp_path, count, each, limits, read):
    """Before: the prefix doubled up to the file's size (1 GiB read, left in the cache)."""
    from embscope.limits import parse_limits
    from embscope.models.resolve import resolve

    spec = gguf_repo(count, each, 1 << 30)
    limit = parse_limits(limits).gguf_metadata_bytes
    err, _ = _bounded(lambda: resolve(spec, limits=parse_limits(limits)))
    msg = _one_line(err)
    assert f"more than the limit of {limit:,}" in msg and "--limit gguf-metadata-bytes=" in msg
    assert sum(r[-1] for r in _weight_gets(hub)) == read
    assert _left_in_cache(tmp_path) == []


def test_a_content_encoding_on_a_range_is_refused(hub, tmp_path):
    """Before: ``Content-Encoding: gzip`` on bytes that are not gzip ended in a DecodingError traceback."""
    hub.content_encoding = "gzip"
    err, _ = _bounded(_resolve())
    msg = _one_line(err)
    assert "Content-Encoding 'gzip' though embscope asked for identity" in msg
    assert _left_in_cache(tmp_path) == []
