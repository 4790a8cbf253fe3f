"""The chat template a model ships, and its rendering in a sandbox.

Templates are untrusted text (GGUF metadata ``tokenizer.chat_template`` or the ``chat_template`` of
``tokenizer_config.json``), so they are rendered in Jinja's immutable sandbox, the environment
transformers' ``apply_chat_template`` uses (``trim_blocks``, ``lstrip_blocks``, a
``raise_exception`` global).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from embscope.models.model import LoadedModel


def read_chat_template(model: "LoadedModel") -> str | None:
    """The chat template the base model ships (GGUF metadata or tokenizer_config.json), if any."""
    path = Path(model.path)
    try:
        if path.suffix == ".gguf":
            from embscope.formats.gguf import open_gguf

            field = open_gguf(path).fields.get("tokenizer.chat_template")
            value = field.contents() if hasattr(field, "contents") else field
            return value if isinstance(value, str) else None
        cfg = path / "tokenizer_config.json"
        if cfg.exists():
            from embscope.formats.files import read_json

            template = read_json(cfg, what="tokenizer config").get("chat_template")
            return template if isinstance(template, str) else None
    except Exception:  # a missing template is not worth failing the run
        return None
    return None


def special_token_strings(model: "LoadedModel") -> dict[str, str]:
    """``{"bos_token": …, "eos_token": …}``: the strings a template reads for the config's ids
    (empty when the id is missing or the model has no tokenizer)."""
    names = {}
    for key in ("bos", "eos"):
        i = model.config.get(f"{key}_token_id")
        i = i[0] if isinstance(i, list) and i else i
        raw = model.vocab.token_bytes(i) if isinstance(i, int) and model.vocab is not None else None
        names[f"{key}_token"] = raw.decode("utf-8", "replace") if raw is not None else ""
    return names


def render(template: str, messages: list[dict[str, Any]], *, add_generation_prompt: bool = False,
           **variables: Any) -> str:
    """``template`` rendered on ``messages`` in the sandbox; a template error raises
    ``jinja2.TemplateError`` (``raise_exception(msg)`` in the template raises one too)."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(msg):
        raise TemplateError(msg)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            **variables)
