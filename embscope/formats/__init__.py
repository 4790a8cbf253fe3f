"""Byte-level readers of untrusted model files, shared by the tokenizer and model loaders.

- :mod:`~embscope.formats.files`: regular files only, size-capped reads, JSON;
- :mod:`~embscope.formats.safetensors`: headers and single tensors of (sharded) safetensors;
- :mod:`~embscope.formats.gguf`: GGUF metadata and tensors;
- :mod:`~embscope.formats.gguf_config`: GGUF metadata → an HF-style config dict.
"""
