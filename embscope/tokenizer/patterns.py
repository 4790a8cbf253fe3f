"""Pre-tokenizer split patterns and special tokens of published tokenizers, in one place.

Each pattern is copied from the tokenizer that publishes it (its ``tokenizer.json`` or tiktoken's
encoding definition); the name says which. The split regexes of GGUF files (llama.cpp's
pre-tokenizers) are in :mod:`embscope.tokenizer.llamacpp_pre`. A pattern splits text into pre-tokens before BPE merges
run inside each one, so a wrong pattern changes token counts silently.
"""

from __future__ import annotations


# Qwen2's pre-tokenizer regex and added tokens, as published in Qwen2's tokenizer.json
# (Qwen Team 2024). The 22 added tokens start right after the 151643 BPE ranks.
QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2_SPECIAL_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
    "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
    "<|repo_name|>", "<|file_sep|>",
)


# Llama 3 and Qwen2 publish theirs in tokenizer.json; GPT-2's is ByteLevel's built-in regex.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")


#: cl100k_base's split pattern (tiktoken); Llama 3 publishes the same one
CL100K_PATTERN = LLAMA3_PATTERN

#: tiktoken rank files carry no pattern: this is the one used for a bare ``.tiktoken`` file
#: (cl100k_base's, which Llama 3's ``tokenizer.model`` shares)
DEFAULT_RANKS_PATTERN = CL100K_PATTERN
