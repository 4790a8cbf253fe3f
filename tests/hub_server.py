"""A Hugging Face hub on loopback: the endpoints ``huggingface_hub`` uses to read one model repo.

    with HubServer({"Qwen/Qwen2-7B": folder}) as hub:
        os.environ["HF_ENDPOINT"] = hub.url      # huggingface_hub now talks to 127.0.0.1
        ...
        hub.bytes_sent                           # body bytes served, all requests together

Answers, for each repo given (a folder of files):

- ``GET /api/models/{repo}/revision/{rev}``: the revision info (``id``, ``sha``, ``siblings``);
- ``HEAD``/``GET /{repo}/resolve/{rev}/{file}``, ``rev`` = ``main`` or the commit: ``ETag``
  (``"<sha256>"`` of the file, as the hub gives LFS files), ``X-Repo-Commit``, ``Content-Length``,
  ``Accept-Ranges: bytes``; a ``Range: bytes=a-b`` (or ``a-``) request gets ``206`` and
  ``Content-Range: bytes a-b/size``. Unknown repo, revision or file: ``404`` with the hub's
  ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``, the last with the
  ``X-Repo-Commit`` it is missing at).

``GET /__stats`` returns the counters as JSON (``/__reset`` also zeroes them), for a server run
in its own process: ``python -m tests.hub_server REPO_ID FOLDER`` prints its URL and serves.

``redirect_lfs`` answers ``resolve`` for ``.safetensors``/``.gguf`` files as the hub does for LFS
files: ``302`` to ``/cdn/{repo}/{file}`` (the storage host's stand-in) with ``X-Linked-Size`` and
``X-Linked-Etag``; the ``/cdn`` path serves the bytes, ranges included.

Knobs for failure tests: ``refuse_ranges`` (answer every ``Range`` with the whole file, ``200``, as
a server without range support does); ``drop_after`` (``(file name, n)``: the first ``GET`` of that
file longer than ``n`` bytes is cut off after ``n`` body bytes, the TCP connection closed
mid-response, once). For weight files (``.safetensors``, ``.gguf``) only, so the small files still
come as the hub sends them: ``empty_ranges`` (every ranged ``GET`` answered ``206`` with the right
``Content-Range`` and an empty body); ``trickle`` (seconds: a ranged body is sent one byte at a
time, that long apart, as a server keeping a read timeout from firing does); ``content_encoding``
(a ``Content-Encoding`` header on ranged answers, the body left as it is). ``etags`` may be filled
beforehand (``{path: sha256}``) for files too large to hash in a test.

The server is a threaded :class:`http.server.ThreadingHTTPServer` speaking HTTP/1.1 on
``127.0.0.1`` and an OS-chosen port; it never reaches the network.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

#: bytes per write of a response body
CHUNK = 1 << 20
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 24):
            h.update(block)
    return h.hexdigest()


class HubServer:
    """A loopback hub serving ``repos`` (``{repo id: folder}``); a context manager."""

    def __init__(self, repos: dict[str, Path], *, commit: str | None = None):
        self.repos = {rid: Path(folder) for rid, folder in repos.items()}
        self.commits = {rid: commit or hashlib.sha1(f"loopback/{rid}".encode()).hexdigest() for rid in repos}
        self._etags: dict[Path, str] = {}
        self.etags = self._etags
        self.refuse_ranges = False
        self.redirect_lfs = False
        self.drop_after: tuple[str, int] | None = None
        self.empty_ranges = False
        self.trickle: float | None = None
        self.content_encoding: str | None = None
        self.bytes_sent = 0
        #: ``(method, path, Range header or None, status, body bytes)`` per request
        self.requests: list[tuple[str, str, str | None, int, int]] = []
        #: the ``Authorization`` header of each request (None when absent), in order
        self.auth: list[str | None] = []
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._busy = 0  # requests being answered

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> "HubServer":
        server = self

        class Handler(_Handler):
            hub = server

        self._httpd = _Quiet(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # a short poll: shutdown() waits for the loop's next poll (0.5 s by default, per test)
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def idle(self, timeout: float = 5.0) -> None:
        """Wait until no request is being answered (its counts are in), at most ``timeout`` s."""
        end = time.monotonic() + timeout
        while self._busy and time.monotonic() < end:
            time.sleep(0.01)

    def reset_counts(self) -> None:
        with self._lock:
            self.bytes_sent = 0
            self.requests.clear()
            self.auth.clear()

    def etag(self, path: Path) -> str:
        if path not in self._etags:
            self._etags[path] = file_sha256(path)
        return self._etags[path]

    def _count(self, record: tuple, auth: str | None = None) -> None:
        with self._lock:
            self.auth.append(auth)
            self.requests.append(record)
            self.bytes_sent += record[-1]


class _Quiet(ThreadingHTTPServer):
    """A client that hangs up mid-answer (as a range-refusing test wants) is no server error."""

    def handle_error(self, request, client_address) -> None:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: HubServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send_json(self, status: int, doc, error: str | None = None, commit: str | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if commit:  # the hub names the commit even when the file is missing (clients cache the 404)
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Length", str(len(body)))
        if error:
            self.send_header("X-Error-Code", error)
            self.send_header("X-Error-Message", doc.get("error", error))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.hub._count((self.command, self.path, self.headers.get("Range"), status, 0), self.headers.get("Authorization"))

    def _repo(self, rid: str, rev: str):
        if rid not in self.hub.repos:
            self._send_json(404, {"error": f"Repository {rid} not found"}, "RepoNotFound")
            return None
        if rev not in ("main", self.hub.commits[rid]):
            self._send_json(404, {"error": f"Revision {rev} not found"}, "RevisionNotFound")
            return None
        return self.hub.repos[rid]

    def do_HEAD(self) -> None:
        self._busy(head=True)

    def do_GET(self) -> None:
        self._busy(head=False)

    def _busy(self, head: bool) -> None:
        with self.hub._lock:
            self.hub._busy += 1
        try:
            self._serve(head)
        finally:
            with self.hub._lock:
                self.hub._busy -= 1

    def _serve(self, head: bool) -> None:
        path = unquote(self.path.split("?", 1)[0])
        if path in ("/__stats", "/__reset"):  # the counters, for a server in another process (bench)
            doc = {"bytes_sent": self.hub.bytes_sent, "requests": list(self.hub.requests)}
            if path == "/__reset":
                self.hub.reset_counts()
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        m = re.match(r"^/api/models/([^/]+/[^/]+)/revision/([^/]+)$", path)
        if m:
            folder = self._repo(*m.groups())
            if folder is not None:
                rid = m.group(1)
                files = sorted(p.name for p in folder.iterdir() if p.is_file())
                self._send_json(200, {"id": rid, "modelId": rid, "sha": self.hub.commits[rid],
                                      "siblings": [{"rfilename": f} for f in files]})
            return
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        cdn = re.match(r"^/cdn/([^/]+/[^/]+)/(.+)$", path)
        if not m and not cdn:
            self._send_json(404, {"error": "not found"})
            return
        rid, rev, name = m.groups() if m else (cdn.group(1), self.hub.commits.get(cdn.group(1), ""), cdn.group(2))
        folder = self._repo(rid, rev)
        if folder is None:
            return
        f = folder / name
        if "/" in name or not f.is_file():
            self._send_json(404, {"error": f"Entry {name} not found"}, "EntryNotFound", self.hub.commits[rid])
            return
        if m and self.hub.redirect_lfs and name.endswith((".safetensors", ".gguf")):
            # as the hub answers LFS files: 302 to the storage host, the file's facts in X-Linked-*
            self.send_response(302)
            self.send_header("Location", f"/cdn/{rid}/{name}")
            self.send_header("X-Linked-Size", str(f.stat().st_size))
            self.send_header("X-Linked-Etag", f'"{self.hub.etag(f)}"')
            self.send_header("X-Repo-Commit", self.hub.commits[rid])
            self.send_header("Content-Length", "0")
            self.end_headers()
            self.hub._count((self.command, self.path, self.headers.get("Range"), 302, 0),
                            self.headers.get("Authorization"))
            return
        size = f.stat().st_size
        begin, end, status = 0, size, 200
        rng = self.headers.get("Range")
        if rng and not self.hub.refuse_ranges:
            r = _RANGE.match(rng.strip())
            if not r or int(r.group(1)) >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                self.hub._count((self.command, self.path, rng, 416, 0), self.headers.get("Authorization"))
                return
            begin = int(r.group(1))
            end = min(size, int(r.group(2)) + 1) if r.group(2) else size
            status = 206
        weights = name.endswith((".safetensors", ".gguf")) and status == 206
        empty = weights and self.hub.empty_ranges
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", "0" if empty else str(end - begin))
        if weights and self.hub.content_encoding:
            self.send_header("Content-Encoding", self.hub.content_encoding)
        self.send_header("ETag", f'"{self.hub.etag(f)}"')
        self.send_header("X-Repo-Commit", self.hub.commits[rid])
        if not self.hub.refuse_ranges:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {begin}-{end - 1}/{size}")
        self.end_headers()
        sent = 0
        cut = None
        drop = self.hub.drop_after
        if not head and drop is not None and drop[0] == name and end - begin > drop[1]:
            self.hub.drop_after = None  # once
            cut = drop[1]
        trickle = self.hub.trickle if weights else None
        try:
            if empty:
                pass
            elif not head and trickle:
                with open(f, "rb") as fh:
                    fh.seek(begin)
                    for _ in range(end - begin):
                        self.wfile.write(fh.read(1))
                        self.wfile.flush()
                        sent += 1
                        time.sleep(trickle)
            elif not head:
                with open(f, "rb") as fh:
                    fh.seek(begin)
                    left = end - begin
                    while left:
                        n = min(CHUNK, left)
                        if cut is not None:
                            n = min(n, cut - sent)
                            if n <= 0:
                                self.close_connection = True
                                self.connection.shutdown(2)  # mid-response: the client sees a short body
                                break
                        block = fh.read(n)
                        self.wfile.write(block)
                        sent += len(block)
                        left -= len(block)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self.hub._count((self.command, self.path, rng, status, sent), self.headers.get("Authorization"))


def main(argv: list[str] | None = None) -> int:
    """``python -m tests.hub_server REPO_ID FOLDER``: serve until killed; prints the URL."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo_id")
    ap.add_argument("folder", type=Path)
    args = ap.parse_args(argv)
    with HubServer({args.repo_id: args.folder}) as hub:
        for f in sorted(args.folder.iterdir()):  # ETags first: hashing GBs inside a HEAD would time it out
            if f.is_file():
                hub.etag(f)
        print(hub.url, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    raise SystemExit(main())
