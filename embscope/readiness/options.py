"""The options of the pre-fine-tune check (:class:`CheckOptions`): how the trainer reads, renders and labels the training data."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embscope.arguments import at_least, one_of
from embscope.corpus.shapes import FORMATS
from embscope.errors import SpecError
from embscope.records import Record


@dataclass
class CheckOptions(Record):
    """The pre-fine-tune check: how the trainer reads, renders and labels the training data."""

    #: training-data record format for the check (null: detected per record)
    data_format: str | None = None
    #: the trainer's sequence length, tokens (null: the config's context)
    max_length: int | None = None
    #: a chat template file (.jinja) to render the training data with (null: the model's own)
    chat_template: str | None = None
    #: the trainer whose ids, labels and loss mask the check follows (embscope.readiness.trainers)
    trainer: str = "trl"
    #: the pad token the user will set (null: the trainer's own choice)
    pad_token: str | None = None
    #: check only this split of data with several (null: each split, reported on its own)
    split: str | None = None
    #: LLaMA-Factory's ``template`` (``--trainer llamafactory``; null: read off the model's chat
    #: template, as LLaMA-Factory does when it is unset)
    lf_template: str | None = None
    #: LLaMA-Factory's ``train_on_prompt``: the prompts in the loss too
    train_on_prompt: bool = False
    #: LLaMA-Factory's ``mask_history``: only the last response in the loss
    mask_history: bool = False
    #: a GGUF model's tokenizer for the check: ``llamacpp`` (as llama.cpp splits) or ``transformers``
    #: (transformers' GGUF conversion: what a TRL or transformers script loading the GGUF gets)
    gguf_tokenizer: str = "llamacpp"
    #: Unsloth's ``train_on_responses_only`` (``--trainer unsloth``): only the assistant responses in the loss
    responses_only: bool = False
    #: its ``instruction_part``, the text that opens a user turn (null: read off the chat template)
    instruction_part: str | None = None
    #: its ``response_part``, the text that opens an assistant turn (null: read off the chat template)
    response_part: str | None = None

    def check(self):
        from embscope.readiness.trainers import GGUF_TOKENIZERS, check_options, get_trainer

        if self.data_format is not None:
            one_of("--format", self.data_format, FORMATS, "a record format")
        at_least("--max-length", self.max_length, 1)
        get_trainer(self.trainer)  # an unknown --trainer fails here, with "did you mean"
        one_of("--gguf-tokenizer", self.gguf_tokenizer, GGUF_TOKENIZERS, "a GGUF tokenizer")
        if self.pad_token is not None and not self.pad_token:
            raise SpecError("--pad-token must name a token, e.g. '<|endoftext|>'")
        check_options(self)
        if self.split is not None and not self.split:
            raise SpecError("--split must name a split, e.g. train")
        if self.chat_template is not None and not Path(self.chat_template).expanduser().is_file():
            raise SpecError(f"--chat-template {self.chat_template}: no such file; pass a chat template file (.jinja)")
        return self
