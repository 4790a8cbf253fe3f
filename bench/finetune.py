"""Real fine-tunes on the CPU for ``embscope diff``: SmolLM2 (or a cut of it) extended with the medical
candidates by ``extend --apply``, then trained with the embedding trainable, or frozen (LoRA on
attention only, through PEFT). Used by ``tests/test_diff.py`` (a cut model, a handful of steps) and
``bench/diff.py`` (the whole SmolLM2-135M, a few dozen steps).

- :func:`cut_model` writes SmolLM2's real tokenizer and real embedding rows (the demo GGUF's Q8_0
  rows, dequantised) under a Llama config of ``layers`` decoder layers (seeded random weights), or
  with ``layers=None`` the whole model as transformers reads it from the GGUF;
- :func:`extend` runs ``embscope.extend(..., apply_to=OUT)`` on the shipped medical corpus;
- :func:`training_texts` picks, for every added token, a corpus line that tokenizes to it (so every
  new token is in the data);
- :func:`train` runs AdamW over those texts (causal-LM loss, transformers' own ``labels``) and
  saves the model folder, or the PEFT adapter folder.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MEDICAL = ROOT / "corpora" / "medical"


def cut_model(out: Path, *, layers: int | None = 2, dtype: str = "float32", seed: int = 0) -> Path:
    """A transformers folder with SmolLM2's tokenizer and embedding rows (see the module docstring)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import embscope
    from embscope.models.fullmodel import load_causal_lm, load_hf_tokenizer
    from embscope.models.writer import hf_tokenizer

    smol = embscope.load_model("smollm2-135m", device="cpu")
    c = smol.config
    if layers is None:
        lm = load_causal_lm(smol)
        if type(getattr(lm, "hf_quantizer", None)).__name__ == "GgufHfQuantizer":
            lm.hf_quantizer = None
            if hasattr(lm.config, "quantization_config"):
                del lm.config.quantization_config
    else:
        torch.manual_seed(seed)
        cfg = LlamaConfig(vocab_size=smol.n_rows, hidden_size=c["hidden_size"], intermediate_size=c["intermediate_size"],
                          num_hidden_layers=layers, num_attention_heads=c["num_attention_heads"],
                          num_key_value_heads=c["num_key_value_heads"], head_dim=c.get("head_dim"),
                          rms_norm_eps=c["rms_norm_eps"], rope_theta=c["rope_theta"],
                          max_position_embeddings=c["max_position_embeddings"], bos_token_id=c["bos_token_id"],
                          eos_token_id=c["eos_token_id"], tie_word_embeddings=True)
        lm = LlamaForCausalLM(cfg)
        with torch.no_grad():
            lm.get_input_embeddings().weight.copy_(smol.embed.float())
    lm = lm.to(getattr(torch, dtype))
    lm.save_pretrained(str(out))
    hf_tokenizer(smol, load_hf_tokenizer(smol), {**smol.config, **lm.config.to_dict()}).save_pretrained(str(out))
    return out


def bf16_copy(folder: Path, out: Path) -> Path:
    """``folder``'s config, tokenizer and input embedding alone, stored in bf16: a bf16 conversion
    as embscope reads it (the embedding is all it reads of a tied model)."""
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    out.mkdir(parents=True)
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (folder / f).is_file():
            shutil.copy(folder / f, out / f)
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        w = f.get_tensor("model.embed_tokens.weight")
    save_file({"model.embed_tokens.weight": w.to(torch.bfloat16).contiguous()}, str(out / "model.safetensors"))
    return out


def extend(base: Path, out: Path, *, top: int = 20) -> dict:
    """``extend --apply`` on the medical corpus: the manifest (ids, terms) of the folder written (the
    run's own report goes to ``out`` + ``-report``)."""
    import embscope

    _, manifest = embscope.extend(str(base), MEDICAL, top=top, apply_to=out, apply_init="subword-mean",
                                  init=["subword-mean"], diagnostics=False, force=True,
                                  out=out.with_name(out.name + "-report"))
    return manifest


def training_texts(folder: Path, ids: list[int], *, extra: int = 16, scan: int = 20_000) -> list[str]:
    """For each added token id, the first medical-corpus line that ``folder``'s tokenizer turns into
    it (of the first ``scan`` lines), then ``extra`` more lines: every new token is in the data."""
    from embscope.corpus.stream import read_texts
    from embscope.tokenizer.load import load_folder_vocabulary

    vocab = load_folder_vocabulary(Path(folder), name="extended")
    lines = list(read_texts(MEDICAL))[:scan]
    wanted, picked = set(ids), []
    for text, got in zip(lines, vocab.encode_batch(lines)):
        hit = wanted.intersection(got)
        if hit:
            picked.append(text)
            wanted -= hit
        if not wanted:
            break
    picked += [t for t in lines[:200] if t not in picked][:extra]
    return picked


def write_jsonl(texts: list[str], path: Path) -> Path:
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), "utf-8")
    return path


def train(folder: Path, texts: list[str], out: Path, *, steps: int, mode: str = "full", lr: float = 1e-3,
          batch: int = 8, seed: int = 0, save_dtype: str | None = None) -> Path:
    """Train ``folder``'s model on ``texts`` for ``steps`` AdamW steps and save to ``out``.

    ``mode``: ``full`` (every weight, the embedding included) or ``lora-attention`` (PEFT LoRA on
    ``q_proj``/``v_proj``: the embedding frozen; ``out`` is then the adapter folder).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(folder))
    lm = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    if mode == "lora-attention":
        from peft import LoraConfig, get_peft_model

        lm = get_peft_model(lm, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    elif mode != "full":
        raise ValueError(f"unknown mode {mode!r}")
    lm.train()
    opt = torch.optim.AdamW([p for p in lm.parameters() if p.requires_grad], lr=lr, weight_decay=0.0)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for step in range(steps):
        part = [texts[(step * batch + k) % len(texts)] for k in range(batch)]
        enc = tok(part, return_tensors="pt", padding=True, truncation=True, max_length=64) if tok.pad_token else None
        if enc is None:
            tok.pad_token_id = pad
            enc = tok(part, return_tensors="pt", padding=True, truncation=True, max_length=64)
        labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
        loss = lm(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    if save_dtype is not None and mode == "full":
        lm = lm.to(getattr(torch, save_dtype))
    lm.save_pretrained(str(out))
    if mode == "full":
        tok.save_pretrained(str(out))
    return out
