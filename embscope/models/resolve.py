"""Model specs → files on disk.

A spec is, in the order tried:

1. a path that exists: a ``.gguf`` file, or a local folder with ``config.json`` and safetensors
   (sharded through ``*.index.json`` or not). A local folder wins over an alias of the same name
   (``./gpt2`` next to the ``gpt2`` alias), and a log line on stderr says so;
2. a registry alias (``smollm2-135m``, ``qwen2-7b``, …; see :mod:`embscope.models.registry`): packaged demo
   models resolve to the package's folder, the others to their HF repo id (step 3);
3. a Hugging Face hub id (``Qwen/Qwen2-7B``) through the standard HF cache (``HF_HOME``). The cache
   is read first; only what is missing is fetched, and only what the command needs (``need``):
   ``config`` (``rope``), ``tokenizer`` (plus the tokenizer files) or ``weights`` (plus the
   safetensors index and the shards that hold the embedding/output tensors). With
   ``HF_HUB_OFFLINE=1`` nothing is fetched; without it, an unreachable hub is detected by one TCP
   connect of at most :data:`HUB_CONNECT_TIMEOUT` seconds instead of huggingface_hub's retries.
   Either way a missing file is a one-line error naming the ``hf download`` command for exactly
   what the command needs. Of the weights, only the embedding/output tensors' bytes are read, by
   range requests into the embscope cache (:mod:`embscope.models.hub_ranges`), unless
   ``download="full"`` or the shards are already whole in the HF cache;
4. a GGUF file in a hub repo, ``org/name/file.gguf``: its metadata and tensor table, then the
   ``token_embd``/``output`` ranges, the same way (``download="full"``: the whole file).
"""

from __future__ import annotations

import logging
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embscope.errors import ModelFileError, PickleRefused, SpecError, did_you_mean
from embscope.models.registry import ALIASES, ModelAlias
from embscope.records import Record

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.hub_ranges import Fetched

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: a GGUF file in a hub repo: ``org/name/file.gguf``
_HUB_GGUF = re.compile(r"^([A-Za-z0-9][\w.-]*/[\w.-]+)/([\w.-]+\.gguf)$")
#: seconds one TCP connect to the hub (or the HTTPS proxy) may take before the hub counts as unreachable
HUB_CONNECT_TIMEOUT = 1.5
#: what a command needs of a model, smallest first
NEEDS = ("config", "tokenizer", "weights")
#: how a hub model's weights are read: the tensors' byte ranges, or the whole shards holding them
DOWNLOADS = ("ranges", "full")
log = logging.getLogger("embscope.models.resolve")


@dataclass
class HubFile(Record):
    """What one run read of one file of a hub repo."""

    #: the file's ETag (sha256 of the whole file for LFS files), as the hub sent it
    etag: str | None
    #: size of the whole file, bytes
    bytes: int
    #: ``{tensor: [begin, end]}`` absolute byte ranges held in the sparse copy
    tensors: dict[str, list[int]] = field(default_factory=dict)
    #: bytes this run received for it (0 when everything came from the cache)
    bytes_read: int = 0
    #: HTTP requests this run made for it
    requests: int = 0


@dataclass
class HubRead(Record):
    """A hub model read by byte ranges (``summary.json`` → ``inputs.model.hub``)."""

    #: the repo id
    repo: str
    #: the commit read
    commit: str
    #: ``ranges``
    download: str
    #: bytes received from the hub in all
    bytes_read: int
    #: {file: what was read of it}
    files: dict[str, HubFile] = field(default_factory=dict)

    @classmethod
    def of(cls, repo_id: str, commit: str, fetched: "dict[str, Fetched]") -> "HubRead":
        return cls(repo=repo_id, commit=commit, download="ranges", bytes_read=sum(f.bytes_read for f in fetched.values()),
                   files={name: HubFile(etag=f.etag, bytes=f.size, tensors=f.tensors, bytes_read=f.bytes_read,
                                        requests=f.requests) for name, f in fetched.items()})


@dataclass
class Resolved:
    """Where a model's files are, before anything heavy is read."""

    spec: str
    #: short name for folders and tables
    name: str
    #: ``package``, ``gguf``, ``folder``, ``hub-cache`` or ``hub-ranges``
    source: str
    #: a folder (safetensors / bin) or a ``.gguf`` file
    path: Path
    #: ``safetensors``, ``gguf`` or ``bin``
    format: str
    alias: ModelAlias | None = None
    #: ``hub-ranges``: repo, commit and, per file, ETag, size, tensor byte ranges and bytes read
    hub: HubRead | None = None
    #: ``tensor name → shard path`` for the tensors we need (safetensors only; filled lazily)
    _config: dict | None = None
    _reader: Any = None

    def gguf_reader(self):
        """The memory-mapped GGUF reader, opened once."""
        if self._reader is None:
            from embscope.formats.gguf import open_gguf

            self._reader = open_gguf(self.path)
        return self._reader

    def config(self) -> dict[str, Any]:
        """``config.json`` as a dict (for GGUF: synthesised from its metadata)."""
        if self._config is None:
            if self.format == "gguf":
                from embscope.formats.gguf_config import config_from_gguf_metadata
                from embscope.formats.gguf import metadata

                reader = self.gguf_reader()
                self._config = config_from_gguf_metadata(
                    metadata(reader), tensor_names=list(reader.tensors))
            else:
                self._config = read_config(self.path / "config.json")
        return self._config


def read_config(path: Path) -> dict[str, Any]:
    from embscope.formats.files import read_json

    if not path.exists():
        raise ModelFileError(f"{path.parent} has no config.json; pass a Hugging Face model folder")
    cfg = read_json(path, what="config")  # regular file, bounded size, any JSON damage → one line
    if not isinstance(cfg, dict):
        raise ModelFileError(f"{path} is not a JSON object; re-download it")
    return cfg


def _folder_format(folder: Path, trust_pickle: bool) -> str:
    if (folder / "model.safetensors.index.json").is_file() or any(folder.glob("*.safetensors")):
        return "safetensors"
    if any(folder.glob("*.gguf")):
        return "gguf"
    if any(folder.glob("pytorch_model*.bin")):
        if not trust_pickle:
            raise PickleRefused(folder)
        return "bin"
    raise ModelFileError(f"{folder} has no weights (*.safetensors, *.gguf or pytorch_model*.bin)")


def _from_folder(spec: str, folder: Path, *, source: str, name: str, alias=None,
                 trust_pickle: bool, need_weights: bool) -> Resolved:
    if not need_weights:
        return Resolved(spec, name, source, folder, "tokenizer-only", alias)
    fmt = _folder_format(folder, trust_pickle)
    if fmt == "gguf":
        files = sorted(folder.glob("*.gguf"))
        return Resolved(spec, name, source, files[0], "gguf", alias)
    return Resolved(spec, name, source, folder, fmt, alias)


def hub_reachable(endpoint: str | None = None, timeout: float = HUB_CONNECT_TIMEOUT) -> bool:
    """Whether one TCP connection to the hub's host (or to the HTTPS proxy, when one is set)
    opens within ``timeout`` seconds. Costs one round trip when the hub is up; at most ``timeout``
    when it is not (an unroutable address), milliseconds when the port is closed."""
    from urllib.parse import urlsplit
    from urllib.request import getproxies, proxy_bypass

    from huggingface_hub import constants

    url = urlsplit(endpoint or constants.ENDPOINT)
    proxy = getproxies().get(url.scheme)
    if proxy and url.hostname and not proxy_bypass(url.hostname):
        url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    host = url.hostname
    if not host:
        return False
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def download_hint(repo_id: str, need: str) -> str:
    """The ``hf download`` command for what a command needs (``config``, ``tokenizer``, ``weights``).

    >>> download_hint("Qwen/Qwen2-7B", "config")
    'hf download Qwen/Qwen2-7B config.json'
    """
    files = ["config.json"]
    if need in ("tokenizer", "weights"):
        files += ["tokenizer.json", "tokenizer_config.json"]
    hint = f"hf download {repo_id} {' '.join(files)}"
    if need == "weights":
        hint += " model.safetensors.index.json (plus the shards holding the embeddings)"
    return hint


def _hub_download(repo_id: str, need: str, download: str = "ranges",
                  budget=None) -> tuple[Path, HubRead | None]:
    """Fetch (or find in the cache) what ``need`` requires of a hub repo.

    Returns the folder to read (the HF cache snapshot; for weights read by ranges, the embscope
    cache folder of :func:`_ranged`) and, for ranges, what was read (for the provenance), else None.
    """
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    offline = bool(constants.HF_HUB_OFFLINE)
    state: dict[str, bool | None] = {"reachable": None}

    def online() -> bool:
        if offline:
            return False
        if state["reachable"] is None:
            state["reachable"] = hub_reachable(constants.ENDPOINT)
        return bool(state["reachable"])

    def get(filename: str, required: bool = True) -> Path | None:
        if not required and _known_missing(repo_id, filename):  # a 404 the HF cache remembers
            return None
        for local_only in (True, False):
            if not local_only and not online():
                break
            try:
                return Path(hf_hub_download(repo_id, filename, local_files_only=local_only,
                                            cache_dir=constants.HF_HUB_CACHE, endpoint=constants.ENDPOINT))
            except LocalEntryNotFoundError:
                continue
            except EntryNotFoundError:
                return None
            except Exception as exc:  # network failures, gated repos, bad ids
                if not required:
                    return None
                raise SpecError(f"cannot fetch {filename} of {repo_id}: {str(exc).splitlines()[0]}; "
                                "check the repo id and your HF token, or pass a local folder") from None
        if not required:
            return None
        if offline:
            how = "HF_HUB_OFFLINE=1 is set"
        else:
            how = f"the hub ({constants.ENDPOINT}) could not be reached within {HUB_CONNECT_TIMEOUT:g} s"
        raise SpecError(f"{repo_id} is not in the HF cache ({constants.HF_HUB_CACHE}) and {how}; "
                        f"download what this command needs with: {download_hint(repo_id, need)}, "
                        "or pass a local folder")

    config = get("config.json")
    snapshot = config.parent
    if need == "config":
        return snapshot, None
    for fname in TOKENIZER_FILES:
        get(fname, required=False)
    if need != "weights":
        return snapshot, None
    index = get("model.safetensors.index.json", required=False)
    if index is None and download == "full":
        get("model.safetensors")
        return snapshot, None
    if index is None:  # one file: its header names the tensors
        if _in_hf_cache(repo_id, snapshot, ["model.safetensors"]):
            return snapshot, None
        return _ranged(repo_id, snapshot, {None: "model.safetensors"}, online, offline, need, budget)
    from embscope.models.names import find_embedding_names
    from embscope.formats.safetensors import weight_map

    wm = weight_map(snapshot)
    embed, out = find_embedding_names(wm, where=f"{repo_id} index")
    shards = sorted({wm[embed]} | ({wm[out]} if out else set()))
    if download == "full" or _in_hf_cache(repo_id, snapshot, shards):  # whole shards: as downloaded before
        for shard in shards:
            get(shard)
        return snapshot, None
    return _ranged(repo_id, snapshot, {embed: wm[embed], **({out: wm[out]} if out else {})},
                   online, offline, need, budget)


def _ranged(repo_id: str, snapshot: Path, where: dict[str | None, str], online, offline: bool,
            need: str, budget=None) -> tuple[Path, HubRead]:
    """The embedding/head tensors (``{tensor: shard}``; ``{None: file}``: the ones its header names)
    through range requests into the embscope cache (see :mod:`embscope.models.hub_ranges`);
    returns the cache folder and what was read, for the provenance."""
    from embscope.assets import cache_dir
    from embscope.models.hub_ranges import cached, fetch_tensors, link_small_files, repo_cache

    commit = snapshot.name  # the HF cache names each snapshot folder by its commit
    folder = repo_cache(cache_dir("hub"), repo_id, commit)
    link_small_files(snapshot, folder)
    shards: dict[str, Any] = {}
    for name, shard in where.items():
        if name is None:
            shards[shard] = _embedding_names
        else:
            shards.setdefault(shard, []).append(name)
    files = {}
    for shard, names in sorted(shards.items()):
        if not cached(folder / shard, names) and not online():
            how = ("HF_HUB_OFFLINE=1 is set" if offline else
                   f"the hub ({_endpoint()}) could not be reached within {HUB_CONNECT_TIMEOUT:g} s")
            raise SpecError(f"the embedding tensors of {repo_id} are not in the embscope cache ({folder}) and "
                            f"{how}; run once online, or download them with: {download_hint(repo_id, need)}")
        files[shard] = fetch_tensors(repo_id, commit, shard, names, folder, budget)
    return folder, HubRead.of(repo_id, commit, files)


def _in_hf_cache(repo_id: str, snapshot: Path, files: list[str]) -> bool:
    """Whether every file is already whole in the HF cache at this snapshot's commit (no network)."""
    from huggingface_hub import constants, try_to_load_from_cache

    for f in files:
        found = try_to_load_from_cache(repo_id, f, cache_dir=constants.HF_HUB_CACHE, revision=snapshot.name)
        if not isinstance(found, str):
            return False
    return True


def _known_missing(repo_id: str, filename: str) -> bool:
    """Whether the HF cache recorded that ``filename`` does not exist at the cached ``main``."""
    from huggingface_hub import constants, try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, filename, cache_dir=constants.HF_HUB_CACHE)
    return found is not None and not isinstance(found, str)


def _embedding_names(header: dict[str, Any]) -> list[str]:
    from embscope.models.names import find_embedding_names

    embed, out = find_embedding_names(header, where="model.safetensors")
    return [embed] + ([out] if out else [])


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def _need(need: str | None, need_weights: bool) -> str:
    if need is None:
        return "weights" if need_weights else "tokenizer"
    if need not in NEEDS:
        raise ValueError(f"need must be one of {NEEDS}, not {need!r}")
    return need


def _hub_gguf(spec: str, repo_id: str, filename: str, download: str, budget=None) -> Resolved:
    """``org/name/file.gguf``: by ranges, its metadata and the embedding/output tensors into the
    embscope cache (:func:`embscope.models.hub_ranges.fetch_gguf`); ``full``: the file into the HF cache."""
    from huggingface_hub import constants

    name = Path(filename).stem.lower()
    offline = bool(constants.HF_HUB_OFFLINE)
    if download == "full":
        from huggingface_hub import hf_hub_download

        try:
            path = hf_hub_download(repo_id, filename, cache_dir=constants.HF_HUB_CACHE,
                                   endpoint=constants.ENDPOINT, local_files_only=offline)
        except Exception as exc:
            raise SpecError(f"cannot fetch {filename} of {repo_id}: {str(exc).splitlines()[0]}; check the "
                            "repo id and your HF token, or pass a local .gguf file") from None
        return Resolved(spec, name, "hub-cache", Path(path), "gguf")
    from embscope.assets import cache_dir
    from embscope.models.hub_ranges import fetch_gguf

    online = not offline and hub_reachable(constants.ENDPOINT)
    try:
        path, fetched, commit = fetch_gguf(repo_id, filename, cache_dir("hub"), online=online, budget=budget)
    except SpecError as err:
        if online:
            raise
        how = ("HF_HUB_OFFLINE=1 is set" if offline else
               f"the hub ({constants.ENDPOINT}) could not be reached within {HUB_CONNECT_TIMEOUT:g} s")
        raise SpecError(f"{err} and {how}; run once online, or download it with: hf download {repo_id} "
                        f"{filename}, and pass the local file") from None
    return Resolved(spec, name, "hub-ranges", path, "gguf", hub=HubRead.of(repo_id, commit, {filename: fetched}))


def _from_hub(r: Resolved, hub: HubRead | None) -> Resolved:
    if hub is not None:
        r.source, r.hub = "hub-ranges", hub
    return r


def resolve(spec: str, *, trust_pickle: bool = False, need_weights: bool = True,
            need: str | None = None, download: str = "ranges", limits=None) -> Resolved:
    """Turn a model spec into a :class:`Resolved` (see the module docstring for the forms).

    ``need`` (``config``, ``tokenizer`` or ``weights``) says what the caller will read; it decides
    what is fetched from the hub and what the offline hint names. ``need_weights=False`` is the
    older spelling of ``need="tokenizer"``. A ``.bin``-only folder is refused with
    :class:`~embscope.errors.PickleRefused` unless ``trust_pickle``.
    ``download`` says how a hub model's weights are read: ``ranges`` (only the embedding/head
    tensors' bytes, see :mod:`embscope.models.hub_ranges`) or ``full`` (the whole shards that hold
    them, into the HF cache). ``limits`` (:class:`~embscope.limits.Limits`, default the defaults)
    bounds the range reads: deadlines, transfer rate, GGUF metadata size (``docs/limits.md``).
    """
    from embscope.assets import package_dir
    from embscope.models.hub_ranges import HubBudget

    need = _need(need, need_weights)
    budget = HubBudget.of(limits)  # the run's hub clock starts here
    if download not in DOWNLOADS:
        raise SpecError(f"--download must be one of {', '.join(DOWNLOADS)}, not {download!r}")
    path = Path(spec).expanduser()
    if spec in ALIASES and path.is_dir():
        log.warning("using the local folder %s, not the alias %r (%s); pass ./%s or the hub id to be explicit",
                    path.resolve(), spec, ALIASES[spec].repo_id, spec)
    elif spec in ALIASES:
        alias = ALIASES[spec]
        if alias.chunked is not None:
            from embscope.assets import assembled_file

            return Resolved(spec, spec, "package", assembled_file(alias.chunked), "gguf", alias)
        if alias.package is not None:
            module, rel = alias.package
            path = package_dir(module, spec) / rel
            if path.suffix == ".gguf":
                return Resolved(spec, spec, "package", path, "gguf", alias)
            return _from_folder(spec, path, source="package", name=spec, alias=alias,
                                trust_pickle=trust_pickle, need_weights=need == "weights")
        folder, hub = _hub_download(alias.repo_id, need, download, budget)
        return _from_hub(_from_folder(spec, folder, source="hub-cache", name=spec, alias=alias,
                                      trust_pickle=trust_pickle, need_weights=need == "weights"), hub)
    if path.exists():
        name = path.stem if path.is_file() else path.name
        if path.is_file():
            if path.suffix.lower() == ".gguf":
                return Resolved(spec, name, "gguf", path, "gguf")
            if path.name == "config.json":
                return resolve(str(path.parent), trust_pickle=trust_pickle, need=need, download=download,
                               limits=limits)
            raise SpecError(f"{spec!r} is a file but not a .gguf model; pass a .gguf file or a model folder")
        return _from_folder(spec, path, source="folder", name=name, trust_pickle=trust_pickle,
                            need_weights=need == "weights")
    from embscope.models.spec_advice import not_a_model

    not_a_model(spec)
    m = _HUB_GGUF.match(spec)
    if m and not spec.startswith((".", "/")):
        return _hub_gguf(spec, m.group(1), m.group(2), download, budget)
    if _HUB_ID.match(spec) and not spec.startswith((".", "/")):
        folder, hub = _hub_download(spec, need, download, budget)
        return _from_hub(_from_folder(spec, folder, source="hub-cache", name=spec.split("/")[-1].lower(),
                                      trust_pickle=trust_pickle, need_weights=need == "weights"), hub)
    raise SpecError(f"unknown model {spec!r}{did_you_mean(spec, ALIASES)}; pass an alias "
                    f"(see `embscope models`), a HF hub id (org/name), a model folder or a .gguf file")


def resolve_config(spec: str) -> dict[str, Any]:
    """The config of any model spec (reads no weights; from the hub, fetches only config.json)."""
    r = resolve(spec, need="config")
    if r.format == "tokenizer-only":
        r.format = "safetensors" if (r.path / "config.json").is_file() else _folder_format(r.path, True)
        if r.format == "gguf":
            r.path = sorted(r.path.glob("*.gguf"))[0]
    return r.config()
