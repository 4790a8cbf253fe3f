"""Filling an empty transformers model with a state dict: the random initialisation skipped, the
head tied where the config says so, and a model that would still miss a weight refused (a full
model with weights transformers had to invent is not the model)."""

from __future__ import annotations

from pathlib import Path


def fill_weights(lm, state: dict, path: Path, *, assign: bool = False) -> None:
    """Load ``state`` into ``lm``, tie the head when the config says so, and refuse the model when a
    weight it needs is still missing (:func:`refuse_missing`). ``assign``: the tensors become the
    parameters themselves (no copy)."""
    missing = lm.load_state_dict(state, strict=False, assign=assign).missing_keys
    if getattr(lm.config, "tie_word_embeddings", False):
        lm.tie_weights()
        head = lm.get_output_embeddings()
        tied = {k for k, v in lm.state_dict(keep_vars=True).items() if head is not None and v is head.weight}
        missing = [k for k in missing if k not in tied]
    refuse_missing(missing, path)


def no_init_weights():
    """transformers' ``no_init_weights``: the empty model's random initialisation skipped
    (SmolLM2-135M: 2.6 of its 11 CPU-s of loading drew random numbers that the GGUF's tensors then
    replaced); buffers computed in the modules' constructors (rotary frequencies) are kept, and the
    loaded state dict and buffers were bit-identical. A plain block where transformers lacks it."""
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # pragma: no cover - older transformers
        from contextlib import nullcontext

        return nullcontext()
    return no_init_weights()


def refuse_missing(missing, path: Path) -> None:
    """A full model with weights transformers had to invent is not the model: refuse it."""
    from embscope.errors import ModelFileError

    if missing:
        missing = sorted(missing)
        raise ModelFileError(f"{path.name} lacks {len(missing)} weights of the full model (e.g. {missing[0]}); "
                             "transformers would fill them with random values; use the rows-only output")
