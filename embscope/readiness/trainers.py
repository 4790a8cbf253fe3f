"""How each trainer turns an example into input ids, labels and a loss mask (``--trainer``).

A hazard's weight depends on the trainer: transformers' ``DataCollatorForLanguageModeling`` masks
the labels *by id* (``labels[labels == pad_token_id] = -100``), so with PAD = EOS the model never
learns to stop, while TRL's collator pads the labels with -100 *by position* and the EOS stays a
label. Each profile below was read from the trainer's own code (file and function cited); the
``transformers`` and ``trl`` ones are checked against the installed libraries by
``tests/test_trainers.py`` (same input ids and label mask on the shipped conversations).

=============  ========================  ===========  ==========================================
profile        PAD when none is set      labels       loss positions
=============  ========================  ===========  ==========================================
``trl``        ``tokenizer.pad_token``,  by position  conversations: every token
(default)      else the EOS                           (``assistant_only_loss=False``);
                                                      prompt-completion, DPO, KTO: the completion
                                                      only (``completion_only_loss``); texts get
                                                      the EOS appended
``transformers`` yours (the common        **by id**    every token except the pad id
               ``pad_token = eos_token``
               makes PAD = EOS)
``unsloth``    ``fix_pad_token``: a       by position  as ``trl`` (Unsloth runs TRL's trainers)
               reserved pad-like token
               when PAD is missing or
               the EOS
``axolotl``    ``special_tokens.pad_token``, by position  assistant turns' content and the EOS
               else the EOS                           after each (``roles_to_train``,
                                                      ``train_on_eos: turn``)
``llamafactory`` the tokenizer's, else    by position  its own template, encoded slot by slot
               the EOS                    (texts: by   (:mod:`~embscope.readiness.llamafactory`):
                                          id)          every response, prompts masked
                                                       (``train_on_prompt``, ``mask_history``);
                                                       texts get the EOS appended
=============  ========================  ===========  ==========================================

Sources (the versions read):

- TRL 1.16: ``trl/trainer/sft_trainer.py`` ``SFTTrainer.__init__`` (``pad_token = args.pad_token or
  tokenizer.pad_token or tokenizer.eos_token``), ``_prepare_dataset`` (``add_eos``, ``tokenize_fn``:
  ``apply_chat_template(tokenize=True, tools=…)`` for conversations, ``tokenizer(text)`` for
  strings, the completion mask from ``common_prefix_length`` of the prompt rendered with
  ``add_generation_prompt=True``; ``build_labels``; truncation to ``max_length`` = 1024, then
  examples left without a label dropped), ``DataCollatorForLanguageModeling.torch_call`` (labels
  padded with -100); ``trl/trainer/dpo_trainer.py`` ``_prepare_dataset`` (``extract_prompt``, the
  prompt length the shorter common prefix of chosen and rejected) and
  ``DataCollatorForPreference``; ``trl/trainer/kto_trainer.py`` ``_prepare_dataset``.
- transformers 5.23: ``transformers/data/data_collator.py`` ``DataCollatorForLanguageModeling``
  (``mlm=False``: ``labels = input_ids.clone()``, ``labels[labels == pad_token_id] = -100``); the
  data as ``tokenizer.apply_chat_template(conv, tokenize=True)`` and ``tokenizer(text)`` give it.
- Unsloth (unsloth 2026.8.13 and unsloth_zoo): ``unsloth_zoo/pad_token.py`` ``fix_pad_token`` (PAD missing,
  equal to the EOS or past the vocabulary → the first reserved family found among the added
  tokens, newest first: ``<|finetune_right_pad_id|>``, …, ``<|endoftext|>``, ``<fim_pad>``, …; then
  a bracketed ``*pad*`` token, the UNK, the config's own ``pad_token_id``; else it adds
  ``<｜PAD▁TOKEN｜>`` and stops), called from ``unsloth_zoo/tokenizer_utils.py`` ``patch_tokenizer``;
  ``unsloth/models/rl.py`` keeps TRL's collators (a ``DataCollatorForSeq2Seq`` without labels is
  swapped for transformers' language-modeling collator, which masks by id, harmless once PAD ≠ EOS).
- Axolotl (0.18): ``src/axolotl/loaders/tokenizer.py`` ``load_tokenizer`` (``special_tokens`` set the
  PAD; a tokenizer without one falls back to the EOS); ``src/axolotl/prompt_strategies/chat_template.py``
  ``ChatTemplateStrategy._tokenize_single_prompt`` (``roles_to_train: ["assistant"]``,
  ``train_on_eos: "turn"``: each trained turn's content, found by ``find_turn``, plus the EOS within
  three tokens after it) and ``utils/collators/batching.py`` (``label_pad_token_id = -100``).
- LLaMA-Factory (0.9.5): ``src/llamafactory/data/template.py`` (``parse_template``: the model's own
  template read into slots when ``template`` is unset; ``Template._encode``: slot by slot;
  ``Template.fix_special_tokens``: ``pad_token = eos_token`` when there is none),
  ``data/converter.py``, ``data/processor/{supervised,pairwise,feedback,pretrain}.py`` and
  ``processor_utils.infer_seqlen`` (``cutoff_len`` = 2048), the SFT, pairwise and KTO collators
  (``label_pad_token_id = IGNORE_INDEX``, ``ignore_pad_token_for_loss=True``) and the pretraining
  stage's ``DataCollatorForLanguageModeling`` (``train/pt/workflow.py``): see
  :mod:`embscope.readiness.llamafactory`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from embscope.readiness.record import PadChoice, TrainerRecord

if TYPE_CHECKING:  # pragma: no cover
    from embscope.readiness.specials import SpecialIds
    from embscope.models.model import LoadedModel

#: the profile used when ``--trainer`` is not given: TRL, on which Unsloth and most recipes build
DEFAULT_TRAINER = "trl"


@dataclass(frozen=True)
class Trainer:
    """One trainer's way of building ids, labels and the loss mask."""

    #: the ``--trainer`` name
    name: str
    #: the library and what of it the profile follows
    title: str
    #: how the PAD is chosen when the user sets none: ``declared-or-eos``, ``yours`` or ``unsloth``
    pad_rule: str
    #: the collator masks every label equal to the pad id (by id), not only the padding (by position)
    masks_pad_by_id: bool
    #: loss positions of a conversation: ``all``, ``assistant-content`` or ``assistant-turns``
    chat_loss: str
    #: prompt-completion, preference and KTO examples: only the completion is in the loss
    completion_only: bool
    #: plain texts and string completions get the EOS appended before tokenizing
    text_eos: bool
    #: ShareGPT turns reach the template as ``raw`` (TRL's ``maybe_convert_to_chatml``: ``from``/``value``
    #: renamed, the values kept) or ``mapped`` (Axolotl's default ``roles``: human → user, gpt →
    #: assistant, system, tool; other values such as ``function_call`` kept, the content a string)
    sharegpt_roles: str
    #: sequences longer than this are truncated (keep the start); None: no default
    max_length: int | None
    #: where ``max_length`` comes from
    max_length_from: str
    #: the remedy for a PAD that is the EOS, in this trainer's terms
    pad_fix: str
    #: the remedy for a model without a chat template
    template_fix: str
    #: what the trainer does to a sequence past the limit
    truncation: str = "they are truncated, keeping the start"
    #: why it drops an example left with no label (empty: it keeps and trains on nothing)
    unlabelled_drop: str = ""
    #: ... only when it truncates (a length limit is set)
    unlabelled_drop_needs_limit: bool = False
    #: why it drops a preference or KTO example whose prompt alone fills the limit (``{trainer}``)
    prompt_drop: str = ""
    #: why it drops an example with a sequence past the limit (empty: it truncates)
    long_drop: str = ""

    def record(self) -> TrainerRecord:
        """The profile as the check records it."""
        return TrainerRecord(name=self.name, title=self.title, masks_pad_by_id=self.masks_pad_by_id,
                             chat_loss=self.chat_loss, completion_only=self.completion_only, text_eos=self.text_eos)


#: TRL's SFT rule: ``_prepare_dataset`` keeps ``any(label != -100)`` after truncating to ``max_length``
TRL_UNLABELLED = "TRL's SFTTrainer drops examples left with no label after truncation to max_length"
#: TRL's DPO and KTO rule: ``_prepare_dataset`` keeps ``len(prompt_ids) < max_length``
TRL_PROMPT = "TRL's {trainer} drops examples whose prompt alone fills max_length"

TRAINERS: dict[str, Trainer] = {t.name: t for t in (
    Trainer("trl", "TRL 1.16 SFTTrainer / DPOTrainer / KTOTrainer (defaults)", "declared-or-eos", False, "all",
            True, True, "raw", 1024, "SFTConfig max_length default",
            "nothing to do for the labels (TRL pads them with -100 by position); to pad with another token set "
            "tokenizer.pad_token before building the trainer (SFTConfig(pad_token=...) in TRL < 2)",
            "set tokenizer.chat_template, or pass --chat-template FILE (SFTConfig(chat_template_path=...))",
            unlabelled_drop=TRL_UNLABELLED, unlabelled_drop_needs_limit=True, prompt_drop=TRL_PROMPT),
    Trainer("transformers", "transformers 5.23 Trainer with DataCollatorForLanguageModeling(mlm=False)", "yours",
            True, "all", False, False, "mapped", None, "none (the model's context)",
            "set a pad token that is not the EOS before building the collator (tokenizer.pad_token = an unused "
            "special token, e.g. '<|endoftext|>' where it is not your EOS; add one and resize the embedding if "
            "there is none)",
            "set tokenizer.chat_template (the instruct model's, or ChatML), or pass --chat-template FILE"),
    Trainer("unsloth", "Unsloth (TRL's trainers, fix_pad_token at load)", "unsloth", False, "all", True, True,
            "raw", 1024, "SFTConfig max_length default",
            "nothing to do: Unsloth's fix_pad_token replaces a PAD equal to the EOS at load",
            "tokenizer = get_chat_template(tokenizer, ...) from unsloth.chat_templates, or --chat-template FILE",
            unlabelled_drop=TRL_UNLABELLED, unlabelled_drop_needs_limit=True, prompt_drop=TRL_PROMPT),
    Trainer("axolotl", "Axolotl chat_template strategy (roles_to_train: [assistant], train_on_eos: turn)",
            "declared-or-eos", False, "assistant-content", True, True, "mapped", None, "sequence_len (your config)",
            "nothing to do for the labels (the collator pads them with -100); set special_tokens: pad_token: "
            "in the config to pad with another token",
            "set chat_template: (a named one, or jinja with chat_template_jinja:) in the config, or pass "
            "--chat-template FILE",
            "Axolotl drops them (excess_length_strategy: drop, its default)",
            unlabelled_drop="Axolotl drops samples with no trainable tokens (drop_no_trainable_tokens)",
            long_drop="Axolotl drops sequences longer than sequence_len (excess_length_strategy: drop, its default)"),
    Trainer("llamafactory", "LLaMA-Factory 0.9.5 SFT/DPO/KTO/pretraining processors (its template, slot by slot)",
            "declared-or-eos", False, "assistant-turns", True, True, "mapped", 2048, "cutoff_len default",
            "nothing to do for the labels (ignore_pad_token_for_loss pads them with -100)",
            "set template: in the config (a registered template), or pass --chat-template FILE",
            "LLaMA-Factory cuts prompt and response in proportion (infer_seqlen) and leaves out the turns past "
            "cutoff_len; texts keep their start"),
)}


def get_trainer(name: str | None) -> Trainer:
    """The profile ``name`` (default :data:`DEFAULT_TRAINER`); a typo gets "did you mean"."""
    from embscope.errors import SpecError, did_you_mean

    name = name or DEFAULT_TRAINER
    if name not in TRAINERS:
        raise SpecError(f"unknown --trainer {name!r}{did_you_mean(name, TRAINERS)}; choose from "
                        f"{', '.join(TRAINERS)}")
    return TRAINERS[name]


#: where a GGUF model's tokenizer comes from (``--gguf-tokenizer``): llama.cpp's splitting rebuilt
#: from the file, or transformers' own GGUF conversion
GGUF_TOKENIZERS = ("llamacpp", "transformers")


def check_options(options) -> None:
    """Refuse a trainer's own option (of ``options``, :class:`~embscope.readiness.options.CheckOptions`)
    under another trainer, two that trainer refuses together, or an unknown value (one-line
    :class:`~embscope.errors.SpecError`)."""
    from embscope.errors import SpecError

    o = options
    if o.gguf_tokenizer not in GGUF_TOKENIZERS:
        raise SpecError(f"--gguf-tokenizer must be one of {', '.join(GGUF_TOKENIZERS)}, got {o.gguf_tokenizer!r}")
    if o.responses_only and get_trainer(o.trainer).name != "unsloth":
        raise SpecError("--responses-only is Unsloth's train_on_responses_only; pass --trainer unsloth with it")
    if (o.instruction_part is None) != (o.response_part is None) or (o.instruction_part is not None
                                                                     and not o.responses_only):
        raise SpecError("--instruction-part and --response-part go together, with --responses-only (or leave both "
                        "out to read them off the chat template)")
    if o.instruction_part == "" or o.response_part == "":
        raise SpecError("--instruction-part and --response-part must not be empty")

    lf = {"--template": o.lf_template is not None, "--train-on-prompt": o.train_on_prompt,
          "--mask-history": o.mask_history}
    if get_trainer(o.trainer).name != "llamafactory" and any(lf.values()):
        flag = next(k for k, v in lf.items() if v)
        raise SpecError(f"{flag} is LLaMA-Factory's option; pass --trainer llamafactory with it, or leave it out")
    if o.train_on_prompt and o.mask_history:
        raise SpecError("--mask-history and --train-on-prompt cannot be used together (LLaMA-Factory refuses "
                        "`mask_history` with `train_on_prompt`); pass one of them")
    if o.lf_template is not None:
        from embscope.readiness.lf_template import named

        named(o.lf_template)  # an unknown name fails here, with "did you mean"


#: where the tokenizer's own special tokens are declared, first first (config.json is the model's)
TOKENIZER_SOURCES = ("tokenizer_config.json", "special_tokens_map.json", "gguf")
#: Unsloth's reserved pad families, in its order (``unsloth_zoo/pad_token.py``)
UNSLOTH_FAMILIES = ("<|finetune_right_pad_id|>", "<|finetune_right_pad|>", "<pad>", "[PAD]", "<PAD>",
                    "<|endoftext|>", "<fim_pad>", "<｜▁pad▁｜>", "[MASK]", "<|reserved", "<|placeholder",
                    "<|dummy_", "[control", "|<EXTRA_TOKENS_", "<SPECIAL_", "<unused", "<|EOT|>",
                    "<|reject-unknown|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")
UNSLOTH_NEW_PAD = "<｜PAD▁TOKEN｜>"


def tokenizer_role(sp: "SpecialIds", role: str) -> tuple[int | None, str | None]:
    """The tokenizer's own id for ``role`` and the file that says so (None when none does)."""
    for src in TOKENIZER_SOURCES:
        ids = sp.sources.get(src, {}).get(role)
        if ids:
            return ids[0], src
    return None, None


def eos_id(sp: "SpecialIds") -> int | None:
    """The EOS the tokenizer appends and the trainer stops on (tokenizer files first, then config)."""
    i, _ = tokenizer_role(sp, "eos")
    if i is not None:
        return i
    ids = sp.ids("eos")
    return ids[0] if ids else None


def pad_token_id(model: "LoadedModel", pad_token: str) -> int:
    """The id of ``--pad-token`` in ``model``'s tokenizer; a token it does not have is one line
    naming its special tokens (checked as soon as the tokenizer loads, before any analysis)."""
    from embscope.errors import SpecError
    from embscope.readiness.specials import token_id

    i = token_id(model, pad_token)
    if i is None:
        strings = model.token_strings()
        specials = ", ".join(repr(strings[j]) for j in sorted(model.vocab.special_ids)[:8]) if model.vocab else ""
        raise SpecError(f"--pad-token {pad_token!r} is not a token of {model.name}; pass one of its tokens "
                        f"(special ones: {specials or 'none'})")
    return i


def choose_pad(trainer: Trainer, model: "LoadedModel", sp: "SpecialIds", pad_token: str | None) -> PadChoice:
    """The PAD ``trainer`` pads with: ``pad_token`` when the user declares one (``--pad-token``),
    else the trainer's own rule (see the module table)."""
    strings = model.token_strings()

    def name(i):
        return strings[i] if i is not None and 0 <= i < len(strings) else None

    if pad_token is not None:
        return PadChoice(pad_token_id(model, pad_token), pad_token, "--pad-token")
    declared, src = tokenizer_role(sp, "pad")
    eos = eos_id(sp)
    if trainer.pad_rule == "unsloth":
        return _unsloth_pad(model, sp, declared, src, eos, name)
    if declared is not None:
        return PadChoice(declared, name(declared), src)
    if trainer.pad_rule == "yours":
        return PadChoice(eos, name(eos), "none declared: the usual tokenizer.pad_token = tokenizer.eos_token")
    return PadChoice(eos, name(eos), "the EOS (no PAD declared)")


def _unsloth_pad(model, sp, declared, src, eos, name) -> PadChoice:
    """``fix_pad_token``'s choice (see the module docstring)."""
    n = model.n_rows
    if declared is not None and declared != eos and declared < n:
        return PadChoice(declared, name(declared), src)
    eos_ids = set(sp.ids("eos")) | ({eos} if eos is not None else set())
    eos_name = name(eos)
    added = [(i, content) for i, content, _ in sorted(sp.added, key=lambda a: -a[0])]
    closers = (">", "|>", "]", ")")

    def ok(i, content):
        return content != eos_name and i not in eos_ids and 0 <= i < n

    for family in UNSLOTH_FAMILIES:
        matches = [(i, c) for i, c in added if c == family or c.startswith(family)]
        matches.sort(key=lambda ic: not ic[1].endswith(closers))  # closed tokens first, stable
        for i, c in matches:
            if ok(i, c):
                return PadChoice(i, c, f"Unsloth's fix_pad_token ({'missing' if declared is None else 'PAD = EOS'}: "
                                       f"reserved {family!r})")
    for i, c in added:
        if "pad" in c.lower() and c.startswith(("<", "[")) and c.endswith(closers) and ok(i, c):
            return PadChoice(i, c, "Unsloth's fix_pad_token (a pad-named token)")
    unk = sp.ids("unk")
    if unk and ok(unk[0], name(unk[0])):
        return PadChoice(unk[0], name(unk[0]), "Unsloth's fix_pad_token (the UNK)")
    cfg = sp.sources.get("config.json", {}).get("pad")
    if cfg and ok(cfg[0], name(cfg[0])):
        return PadChoice(cfg[0], name(cfg[0]), "Unsloth's fix_pad_token (config.json pad_token_id)")
    return PadChoice(None, UNSLOTH_NEW_PAD, "Unsloth's fix_pad_token finds no pad token, adds "
                     f"{UNSLOTH_NEW_PAD!r} and stops", new_token=True)
