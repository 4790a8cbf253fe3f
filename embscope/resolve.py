"""Model specs → files on disk.

A spec is, in the order tried:

1. a registry alias (``smollm2-135m``, ``qwen2-7b``, …; see :mod:`embscope.registry`): packaged demo
   models resolve to the package's folder, the others to their HF repo id (step 4);
2. a ``.gguf`` file;
3. a local folder with ``config.json`` and safetensors (sharded through ``*.index.json`` or not);
4. a Hugging Face hub id (``Qwen/Qwen2-7B``) through the standard HF cache (``HF_HOME``). The cache
   is read first; only what is missing is fetched, and only config, tokenizer files, the
   safetensors index and the shards that hold the embedding/output tensors. With
   ``HF_HUB_OFFLINE=1`` nothing is fetched and a missing file is a one-line error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from embscope.errors import ModelFileError, SpecError, did_you_mean
from embscope.registry import ALIASES, ModelAlias

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass
class Resolved:
    """Where a model's files are, before anything heavy is read."""

    spec: str
    #: short name for folders and tables
    name: str
    #: ``package``, ``gguf``, ``folder`` or ``hub-cache``
    source: str
    #: a folder (safetensors / bin) or a ``.gguf`` file
    path: Path
    #: ``safetensors``, ``gguf`` or ``bin``
    format: str
    alias: ModelAlias | None = None
    #: ``tensor name → shard path`` for the tensors we need (safetensors only; filled lazily)
    _config: dict | None = None
    _reader: Any = None

    def gguf_reader(self):
        """The memory-mapped GGUF reader, opened once."""
        if self._reader is None:
            from embscope.loaders.gguf import open_gguf

            self._reader = open_gguf(self.path)
        return self._reader

    def config(self) -> dict[str, Any]:
        """``config.json`` as a dict (for GGUF: synthesised from its metadata)."""
        if self._config is None:
            if self.format == "gguf":
                from embscope.loaders.gguf_config import config_from_gguf_metadata
                from embscope.loaders.gguf import metadata

                reader = self.gguf_reader()
                self._config = config_from_gguf_metadata(
                    metadata(reader), tensor_names=list(reader.tensors))
            else:
                self._config = read_config(self.path / "config.json")
        return self._config


def read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelFileError(f"{path.parent} has no config.json; pass a Hugging Face model folder")
    try:
        cfg = json.loads(path.read_text("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{path} is not valid JSON ({exc}); re-download it") from None
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
            raise SpecError(f"{folder} holds only PyTorch .bin weights (pickle, which can run code when "
                            "loaded); convert them to safetensors, or pass --trust-pickle to load them "
                            "with torch.load(weights_only=True)")
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


def _hub_download(repo_id: str, need_weights: bool) -> Path:
    """Fetch (or find in the cache) what we need of a hub repo; returns the snapshot folder."""
    from huggingface_hub import constants, hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    offline = bool(constants.HF_HUB_OFFLINE)

    def get(filename: str, required: bool = True) -> Path | None:
        for local_only in ([True] if offline else [True, False]):
            try:
                return Path(hf_hub_download(repo_id, filename, local_files_only=local_only))
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
        how = ("HF_HUB_OFFLINE=1 is set" if offline else "the hub could not be reached")
        raise SpecError(f"{repo_id} is not in the HF cache ({constants.HF_HUB_CACHE}) and {how}; "
                        f"download it first with: hf download {repo_id} config.json tokenizer.json "
                        "model.safetensors.index.json (plus the shards holding the embeddings), "
                        "or pass a local folder")

    config = get("config.json")
    snapshot = config.parent
    for fname in TOKENIZER_FILES:
        get(fname, required=False)
    if not need_weights:
        return snapshot
    index = get("model.safetensors.index.json", required=False)
    if index is None:
        get("model.safetensors")
        return snapshot
    from embscope.loaders.names import find_embedding_names
    from embscope.loaders.safetensors import weight_map

    wm = weight_map(snapshot)
    embed, out = find_embedding_names(wm, where=f"{repo_id} index")
    for shard in sorted({wm[embed]} | ({wm[out]} if out else set())):
        get(shard)
    return snapshot


def resolve(spec: str, *, trust_pickle: bool = False, need_weights: bool = True) -> Resolved:
    """Turn a model spec into a :class:`Resolved` (see the module docstring for the forms)."""
    from embscope.assets import package_dir

    if spec in ALIASES:
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
                                trust_pickle=trust_pickle, need_weights=need_weights)
        folder = _hub_download(alias.repo_id, need_weights)
        return _from_folder(spec, folder, source="hub-cache", name=spec, alias=alias,
                            trust_pickle=trust_pickle, need_weights=need_weights)
    path = Path(spec).expanduser()
    if path.exists():
        name = path.stem if path.is_file() else path.name
        if path.is_file():
            if path.suffix.lower() == ".gguf":
                return Resolved(spec, name, "gguf", path, "gguf")
            if path.name == "config.json":
                return resolve(str(path.parent), trust_pickle=trust_pickle, need_weights=need_weights)
            raise SpecError(f"{spec!r} is a file but not a .gguf model; pass a .gguf file or a model folder")
        return _from_folder(spec, path, source="folder", name=name, trust_pickle=trust_pickle,
                            need_weights=need_weights)
    if _HUB_ID.match(spec) and not spec.startswith((".", "/")):
        folder = _hub_download(spec, need_weights)
        return _from_folder(spec, folder, source="hub-cache", name=spec.split("/")[-1].lower(),
                            trust_pickle=trust_pickle, need_weights=need_weights)
    raise SpecError(f"unknown model {spec!r}{did_you_mean(spec, ALIASES)}; pass an alias "
                    f"(see `embscope models`), a HF hub id (org/name), a model folder or a .gguf file")


def resolve_config(spec: str) -> dict[str, Any]:
    """The config of any model spec (reads no weights)."""
    r = resolve(spec, need_weights=False)
    if r.format == "tokenizer-only":
        r.format = "safetensors" if (r.path / "config.json").is_file() else _folder_format(r.path, True)
        if r.format == "gguf":
            r.path = sorted(r.path.glob("*.gguf"))[0]
    return r.config()
