"""One file of one hub revision, read by HTTP range requests within the run's bounds.

:class:`Remote` makes every request through ``huggingface_hub`` (:func:`~huggingface_hub.hf_hub_url`,
:func:`~huggingface_hub.get_hf_file_metadata`, :func:`~huggingface_hub.utils.build_hf_headers`,
:func:`~huggingface_hub.get_session`), so the user's token, ``HF_ENDPOINT`` and proxies apply as
they do to ``hf download``, and checks each answer: ``206``, a ``Content-Range`` naming the asked
range and the HEAD's size, no ``Content-Encoding``, no byte past the range. :class:`HubBudget`
holds the run's bounds (``docs/limits.md``):

- time: every read of one file ends within ``hub-file-seconds`` of its HEAD, and every read of the
  run within ``hub-run-seconds`` of the first; no socket read waits more than :data:`TIMEOUT`, nor
  past the deadline left when its request started;
- rate: a transfer slower than ``hub-min-rate`` bytes/s over :data:`RATE_WINDOW` seconds is
  stopped (a server trickling a byte at a time never lets the read timeout fire);
- retries: an answer that ends before its range does (a drop, or ``206`` with an empty body) is
  asked again from the last byte written, at most :data:`MAX_STALLS` times in a row without a new
  byte and :data:`MAX_RESUMES` times per range in all;
- encodings: an answer with a ``Content-Encoding`` (embscope asks for ``identity``) is refused, as
  its bytes are not the file's.

Each is a one-line :class:`~embscope.errors.ModelFileError`.
"""

from __future__ import annotations

import importlib
import os
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from embscope.errors import ModelFileError, SpecError

if TYPE_CHECKING:  # pragma: no cover
    from embscope.limits import Limits

#: answers per byte range that may end before it does (drops, short bodies), new bytes or not
MAX_RESUMES = 20
#: answers in a row that may end without one new byte (a server answering ``206`` with an empty
#: body would otherwise be asked again forever)
MAX_STALLS = 3
#: seconds to wait for the server (connect and each read, never past the deadlines); a stalled
#: stream counts as dropped
TIMEOUT = 60.0
#: seconds over which the transfer rate is measured against ``hub-min-rate``
RATE_WINDOW = 30.0
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")



@dataclass
class HubBudget:
    """The time and size bounds of one run's hub reads (``hub-*`` and ``gguf-metadata-bytes``
    of :class:`embscope.limits.Limits`); the run's clock starts when it is made."""

    #: seconds one file's reads may take, from its HEAD
    file_seconds: float = 3600.0
    #: seconds all the run's reads may take, from the budget's creation
    run_seconds: float = 7200.0
    #: slowest transfer accepted, bytes/s over :data:`RATE_WINDOW`
    min_rate: float = 32 << 10
    #: largest GGUF metadata and tensor table, bytes
    gguf_metadata_bytes: int = 64 << 20
    started: float = field(default_factory=time.monotonic)

    @classmethod
    def of(cls, limits: "Limits | None" = None) -> "HubBudget":
        from embscope.limits import Limits

        b = limits or Limits()
        return cls(float(b.hub_file_seconds), float(b.hub_run_seconds), float(b.hub_min_rate),
                   int(b.gguf_metadata_bytes))


class Remote:
    """One file of one revision on the hub: its URL, headers and the checks on each answer."""

    def __init__(self, repo_id: str, filename: str, commit: str, budget: HubBudget | None = None):
        from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        self.repo_id, self.filename, self.commit = repo_id, filename, commit
        self.budget = budget = budget or HubBudget()
        now = time.monotonic()
        self.file_deadline = now + budget.file_seconds
        self.run_deadline = budget.started + budget.run_seconds
        self.url = hf_hub_url(repo_id, filename, revision=commit or "main", endpoint=constants.ENDPOINT)
        self.headers = build_hf_headers()  # the user's token, as hf download sends it
        self.headers["Accept-Encoding"] = "identity"  # byte offsets are offsets of the file itself
        self.requests = self.bytes_read = 0
        try:
            meta = get_hf_file_metadata(self.url, timeout=self._wait())
        except ModelFileError:
            raise
        except Exception as exc:  # gated repo, missing file, network: huggingface_hub's own message
            raise SpecError(f"cannot read {filename} of {repo_id}: {str(exc).splitlines()[0]}; check the "
                            "repo id and your HF token, or pass --download full") from None
        self.requests += 1
        if commit is None:  # "main": pin every later request to the commit it names now
            if not meta.commit_hash:
                raise ModelFileError(f"the hub named no commit for {filename} of {repo_id}; pass --download full")
            self.commit = commit = meta.commit_hash
            self.url = hf_hub_url(repo_id, filename, revision=commit, endpoint=constants.ENDPOINT)
        elif meta.commit_hash and meta.commit_hash != commit:
            raise ModelFileError(f"{filename} of {repo_id} is at commit {meta.commit_hash}, not {commit} "
                                 "as its config; run again (the repo changed meanwhile)")
        if not meta.size:
            raise ModelFileError(f"the hub gave no size for {filename} of {repo_id}; pass --download full")
        self.size, self.etag = int(meta.size), meta.etag

    def _transport_errors(self):
        """The HTTP library's request-error class (httpx for huggingface_hub 1.x, httpx2 for 2.x):
        network failures, timeouts, protocol errors, redirect loops."""
        from huggingface_hub import get_session

        module = importlib.import_module(type(get_session()).__module__.split(".")[0])
        return (module.RequestError, OSError)

    def _wait(self) -> float:
        """Seconds a socket may wait now: :data:`TIMEOUT`, never past the file's or the run's
        deadline (a one-line error once one has passed)."""
        now = time.monotonic()
        if now >= self.file_deadline or now >= self.run_deadline:
            per_file = self.file_deadline <= self.run_deadline
            seconds = self.budget.file_seconds if per_file else self.budget.run_seconds
            name = "hub-file-seconds" if per_file else "hub-run-seconds"
            what = f"reading {self.filename} of {self.repo_id}" if per_file else "the hub reads of this run"
            raise ModelFileError(
                f"{what} passed the limit of {seconds:g} s ({self.bytes_read:,} bytes read); the server is too "
                f"slow: run again later, raise the limit with --limit {name}={2 * int(seconds)}, or pass "
                "--download full")
        return max(0.05, min(TIMEOUT, self.file_deadline - now, self.run_deadline - now))

    def fetch(self, begin: int, end: int, fd: int) -> None:
        """Write bytes ``[begin, end)`` of the file at the same offsets of ``fd``, asking again from
        the last byte written when an answer ends early (see the module docstring's bounds)."""
        from huggingface_hub import get_session

        errors = self._transport_errors()
        at = [begin]  # the next byte to write; _stream advances it as blocks land
        resumes = stalls = 0
        while at[0] < end:
            before = at[0]
            try:
                self._stream(get_session(), at, end, fd)
                why = "the answer ended early" if at[0] > before else "an answer without a byte of its range"
            except errors as exc:
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if at[0] >= end:
                break
            self._wait()  # a deadline that passed while waiting is the error to report
            resumes += 1
            stalls = 0 if at[0] > before else stalls + 1
            if stalls > MAX_STALLS or resumes > MAX_RESUMES:
                how = (f"{stalls} answers in a row brought no new byte" if stalls > MAX_STALLS
                       else f"the connection dropped {resumes} times")
                raise ModelFileError(
                    f"{how} while reading bytes {begin}..{end} of {self.filename} of {self.repo_id} "
                    f"({why[:160]}); run again later, or pass --download full") from None

    def _stream(self, client, at: list[int], end: int, fd: int) -> None:
        pos = at[0]
        headers = dict(self.headers, Range=f"bytes={pos}-{end - 1}")
        self.requests += 1
        with client.stream("GET", self.url, headers=headers, timeout=self._wait()) as resp:
            if resp.status_code == 200:
                raise ModelFileError(
                    f"the server answered a range request for {self.filename} of {self.repo_id} with the "
                    f"whole file (HTTP 200, no Range support); pass --download full to fetch whole shards")
            if resp.status_code != 206:
                raise ModelFileError(f"HTTP {resp.status_code} for bytes {pos}..{end} of {self.filename} of "
                                     f"{self.repo_id}; check your HF token, or pass --download full")
            m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", "").strip())
            if not m or int(m.group(1)) != pos or int(m.group(2)) != end - 1 or (
                    m.group(3) != "*" and int(m.group(3)) != self.size):
                raise ModelFileError(
                    f"the server sent Content-Range {resp.headers.get('Content-Range')!r} for bytes "
                    f"{pos}..{end - 1}/{self.size} of {self.filename}; pass --download full")
            encoding = resp.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                raise ModelFileError(
                    f"the server sent bytes {pos}..{end - 1} of {self.filename} of {self.repo_id} with "
                    f"Content-Encoding {encoding[:40]!r} though embscope asked for identity; an encoded answer's "
                    "bytes are not the file's: pass --download full")
            mark_t, mark_pos = time.monotonic(), pos
            for block in resp.iter_raw():  # as they arrive, never decoded: a dropped stream loses nothing
                if pos + len(block) > end:
                    raise ModelFileError(f"the server sent more than bytes {pos}..{end} of {self.filename}; "
                                         "pass --download full")
                os.pwrite(fd, block, pos)
                pos += len(block)
                at[0] = pos
                self.bytes_read += len(block)
                now = time.monotonic()
                if now - mark_t >= RATE_WINDOW:
                    rate = (pos - mark_pos) / (now - mark_t)
                    if rate < self.budget.min_rate:
                        raise ModelFileError(
                            f"the server sent {self.filename} of {self.repo_id} at {rate:,.0f} bytes/s over "
                            f"{now - mark_t:.0f} s, below the limit of {self.budget.min_rate:,.0f} (hub-min-rate); "
                            "run again later, lower it with --limit hub-min-rate=N, or pass --download full")
                    mark_t, mark_pos = now, pos
                self._wait()
