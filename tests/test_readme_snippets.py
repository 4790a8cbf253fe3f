"""The README's Python blocks run as written, on the shipped files: the library block (every
command as one call) and the training-callback block (TRL's SFTTrainer on the folder the library
block's ``extend`` wrote). They run in a temporary folder that holds the shipped ``corpora`` (a
link), so the relative paths of the README are the ones read, and what they write stays there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def python_blocks() -> list[str]:
    """The README's ```python blocks, in order."""
    return re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text("utf-8"), flags=re.S | re.M)


def test_the_readme_names_the_extra_its_callback_block_needs():
    """The callback block imports trl; the README names the extra that installs it, and
    pyproject.toml defines that extra with the versions requirements-dev.txt pins."""
    import tomllib

    blocks = python_blocks()
    assert any("from trl import" in b for b in blocks)
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "pip install -e '.[train]'" in readme
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]["optional-dependencies"]["train"]
    dev = (ROOT / "requirements-dev.txt").read_text("utf-8").split()
    for pin in extra:
        assert pin in dev, pin
    assert {p.split("==")[0] for p in extra} >= {"trl", "accelerate"}


@pytest.mark.slow
def test_readme_python_blocks_run_as_written(tmp_path, monkeypatch):
    """Both blocks, exec'd line for line in one namespace: every call returns, the extended folder
    is written and trained, and the callback's checks are in the trainer's log."""
    blocks = python_blocks()
    library = next(b for b in blocks if b.startswith("import embscope"))
    callback = next(b for b in blocks if "EmbscopeCallback" in b)
    (tmp_path / "corpora").symlink_to(ROOT / "corpora")
    monkeypatch.chdir(tmp_path)
    ns: dict = {}
    exec(compile(library, "README.md (library block)", "exec"), ns)
    assert (tmp_path / "out" / "smollm2-med" / "embscope_extension.json").is_file()
    assert ns["res"].summary.sections.extension.saved_fraction > 0 and ns["manifest"] is not None
    exec(compile(callback, "README.md (callback block)", "exec"), ns)
    trainer = ns["trainer"]
    steps = int(re.search(r"max_steps=(\d+)", callback).group(1))
    assert steps >= 2 and trainer.state.global_step == steps  # every step the README asks for ran
    assert any("embscope/new_rows_moved" in entry for entry in trainer.state.log_history)
    # the end report is written, and counts the new rows that moved as the live check does
    final = next(e for e in reversed(trainer.state.log_history) if "embscope/new_rows_moved_final" in e)
    assert (tmp_path / "out" / "smollm2-tuned" / "embscope" / "summary.json").is_file(), final.get("embscope/report")
    assert final["embscope/new_rows_moved_final_report"] == final["embscope/new_rows_moved_final"]
