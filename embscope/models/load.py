"""``load_model(spec)``: the embedding matrices of a model, and nothing else of it.

Data flow: :func:`embscope.models.resolve.resolve` (spec → files) → read the input embedding and, when
untied, the output matrix (safetensors: only the shards that hold them; GGUF: dequantised;
PyTorch ``.bin``: only with ``trust_pickle``, through ``torch.load(weights_only=True)``) → the
model's tokenizer → rows reconciled with tokens → :class:`~embscope.models.model.LoadedModel`.

Tied or untied is decided from the tensors present (an output head stored apart is untied unless it
is bit-identical to the embedding), cross-checked with ``tie_word_embeddings`` in the config.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from embscope.arguments import checked
from embscope.config import hidden_size  # the one hidden-size reader (re-exported)
from embscope.errors import DeviceError, ModelFileError, SpecError, VocabError
from embscope.models.model import LoadedModel
from embscope.models.resolve import Resolved, resolve



def pick_device(device: str = "auto") -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without one is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceError("--device cuda was given but no CUDA GPU is visible to torch; use "
                              "--device cpu, or install a CUDA build of torch (docs/install.md, GPU install)")
        return device
    if device != "cpu":
        raise DeviceError(f"unknown device {device!r}; use auto, cpu or cuda")
    return device


def _read_safetensors(r: Resolved):
    from embscope.formats.files import check_regular, inside
    from embscope.models.names import find_embedding_names
    from embscope.formats.safetensors import read_header, read_tensor, weight_map

    folder = r.path
    wm = weight_map(folder)
    headers: dict[Path, dict] = {}
    if wm is None:
        files = sorted(folder.glob("*.safetensors"))
        if len(files) > 1:
            raise ModelFileError(f"{folder} has {len(files)} safetensors files but no "
                                 "model.safetensors.index.json; re-download the index")
        headers[files[0]] = read_header(files[0])
        where = {name: files[0] for name in headers[files[0]]}
    else:
        where = {name: inside(folder, shard, where="model.safetensors.index.json") for name, shard in wm.items()}
    embed_name, out_name = find_embedding_names(where, where=str(folder))
    tensors = {}
    for key, name in (("embed", embed_name), ("output", out_name)):
        if name is None:
            continue
        shard = where[name]
        if not os.path.lexists(shard):
            raise ModelFileError(f"{shard.name} (holding {name}) is missing from {folder}; re-download it")
        check_regular(shard, what="safetensors shard")
        if shard not in headers:
            headers[shard] = read_header(shard)
        if name not in headers[shard]:
            raise ModelFileError(f"the index says {name} is in {shard.name}, but it is not; re-download "
                                 "the checkpoint")
        tensors[key] = read_tensor(shard, name, headers[shard])
    dtype = headers[where[embed_name]][embed_name]["dtype"]
    names = {"embed": embed_name, "output": out_name}
    return tensors["embed"], tensors.get("output"), names, dtype, sorted(str(p) for p in headers)


def _read_bin(r: Resolved):
    import torch

    from embscope.models.names import find_embedding_names

    from embscope.formats.files import check_regular

    files = sorted(r.path.glob("pytorch_model*.bin"))
    state = {}
    for f in files:
        check_regular(f, what="PyTorch checkpoint")
        try:
            state.update(torch.load(f, map_location="cpu", weights_only=True, mmap=True))
        except Exception as exc:
            raise ModelFileError(f"refused to load {f.name}: {str(exc).splitlines()[0]} (weights_only=True "
                                 "allows tensors only); convert the checkpoint to safetensors") from None
    embed_name, out_name = find_embedding_names(state, where=str(r.path))
    embed = state[embed_name]
    out = state[out_name] if out_name else None
    return embed, out, {"embed": embed_name, "output": out_name}, str(embed.dtype).replace("torch.", ""), [str(f) for f in files]


#: the dequantised matrices of the last GGUF file read, by the file's identity (see :func:`_read_gguf`)
_GGUF_LAST: dict[tuple, tuple] = {}
#: the most float32 bytes kept (Gemma-3-270M's 262,144 × 640 rows: 0.67 GB)
GGUF_KEEP_BYTES = 1 << 30


def _read_gguf(r: Resolved):
    """The GGUF file's matrices, dequantised to float32. The last file read is kept while it is
    unchanged (real path, inode, size, mtime) and its matrices fit :data:`GGUF_KEEP_BYTES`: a
    process that loads one quantised model again (a notebook, a training callback, ``diff`` of
    two runs) does not dequantise it again (Gemma-3-270M's Q8_0 rows: ~2.5 s each time). The
    matrices are then shared between the loads; embscope never writes into them."""
    import torch

    from embscope.formats.files import file_identity
    from embscope.formats.gguf import read_matrices

    key = file_identity(r.path)
    hit = _GGUF_LAST.get(key)
    if hit is None:
        embed, out, names, dtype = read_matrices(r.gguf_reader(), where=r.path.name)
        hit = (embed, out, names, dtype)
        _GGUF_LAST.clear()
        if embed.nbytes + (out.nbytes if out is not None else 0) <= GGUF_KEEP_BYTES:
            _GGUF_LAST[key] = hit
    embed, out, names, dtype = hit
    return (torch.from_numpy(embed), torch.from_numpy(out) if out is not None else None,
            dict(names), dtype, [str(r.path)])


@checked
def load_model(spec: "str | Resolved", *, device: str = "auto", trust_pickle: bool = False,
               tokens_past_rows: bool = False, download: str = "ranges") -> LoadedModel:
    """Load the embedding (and untied output) matrix of a model, with its tokenizer.

    Args:
        spec: alias, hub id, model folder or ``.gguf`` file (see :mod:`embscope.models.resolve`), or an
            already resolved spec.
        device: ``auto`` (GPU when present), ``cpu`` or ``cuda``. The matrices keep their stored
            dtype on both (bf16 for most checkpoints; GGUF quantised types are dequantised to float32);
            on CPU safetensors are memory-mapped, and each analysis converts row chunks to float32
            as it goes.
        trust_pickle: allow PyTorch ``.bin`` checkpoints (still ``weights_only=True``).
        tokens_past_rows: accept a tokenizer with more tokens than the matrix has rows (a resize
            forgotten after adding tokens: what ``embscope check`` reports as ``id-beyond-matrix``);
            the ids past the rows have no row and no category.
        download: a hub model's weights: ``ranges`` reads only the embedding/head tensors' bytes
            (:mod:`embscope.models.hub_ranges`), ``full`` the whole shards that hold them.

    Returns:
        :class:`~embscope.models.model.LoadedModel`.

    Example:
        >>> m = load_model("smollm2-135m", device="cpu")
        >>> m.embed.shape, m.tied
        (torch.Size([49152, 576]), True)
    """
    t0 = time.perf_counter()
    dev = pick_device(device)
    r = spec if isinstance(spec, Resolved) else resolve(spec, trust_pickle=trust_pickle, download=download)
    config = r.config()
    readers = {"safetensors": _read_safetensors, "gguf": _read_gguf, "bin": _read_bin}
    embed, out, names, dtype, files = readers[r.format](r)
    if embed.ndim != 2:
        raise ModelFileError(f"{names['embed']} has shape {tuple(embed.shape)}, expected (vocab, hidden)")
    width = hidden_size(config, where=str(r.path))
    if embed.shape[1] != width:
        raise ModelFileError(f"{names['embed']} is {tuple(embed.shape)} but config hidden size is {width}; "
                             "the config does not belong to these weights")
    if out is not None and tuple(out.shape) != tuple(embed.shape):
        raise ModelFileError(f"output matrix {tuple(out.shape)} does not match the embedding "
                             f"{tuple(embed.shape)}; unsupported checkpoint layout")
    tied = out is None or (out.data_ptr() == embed.data_ptr()) or _same_rows(out, embed)
    if tied:
        out = None
        names["output"] = None
    # Stored dtype everywhere: on CPU memory-mapped (analyses convert row chunks to float32),
    # on CUDA copied to the GPU.
    if dev != "cpu":
        embed = embed.to(device=dev)
        out = out.to(device=dev) if out is not None else None

    from embscope.models.vocabulary import model_vocabulary

    vocab = model_vocabulary(r)
    rows = int(embed.shape[0])
    if vocab is not None and len(vocab) > rows and not tokens_past_rows:
        raise VocabError(f"the tokenizer has {len(vocab)} tokens but the embedding has only {rows} rows; "
                         "the tokenizer does not belong to this model")
    return LoadedModel(spec=r.spec, name=r.name, source=r.source, path=str(r.path),
                       arch=_arch(config), config=config, embed=embed, output=out, tied=tied,
                       dtype=dtype, device=dev, vocab=vocab, tensor_names=names,
                       files_read=files, load_seconds=time.perf_counter() - t0)


def _same_rows(a, b, sample: int = 64) -> bool:
    """Whether two matrices hold the same values: a strided sample of rows first, all rows only
    when the sample agrees (tied checkpoints that store the head twice)."""
    import torch

    step = max(1, a.shape[0] // sample)
    if not torch.equal(a[::step], b[::step]):
        return False
    return bool(torch.equal(a, b))


def _arch(config: dict) -> str | None:
    """``model_type``, else the first of ``architectures``; only text counts (configs are untrusted)."""
    arch = config.get("model_type")
    if isinstance(arch, str) and arch:
        return arch
    archs = config.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        return archs[0]
    return None


__all__ = ["load_model", "pick_device", "hidden_size", "SpecError"]
