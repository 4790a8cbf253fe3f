"""The Python API refuses arguments of the wrong type at the call, in one line of embscope's own
error (``ArgumentError``, a ``SpecError`` and a ``TypeError``) that names the fix, before any
model is resolved or any corpus read (:mod:`embscope.arguments`)."""

from __future__ import annotations

import inspect
import typing

import pytest

import embscope
from embscope.errors import ArgumentError, SpecError


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a call gets as far as resolving a model or reading a config."""
    import embscope.models.resolve
    import embscope.runner

    monkeypatch.setattr(embscope.runner, "_resolve", lambda *a, **k: pytest.fail("the model was resolved"))
    monkeypatch.setattr(embscope.models.resolve, "resolve_config", lambda *a, **k: pytest.fail("config was read"))


@pytest.mark.parametrize("call, message", [
    (lambda: embscope.scan(123), r"^scan\(\): model=123 must be a string, not int$"),
    (lambda: embscope.fertility(["gpt2"]), r"^fertility\(\): tokenizer=\['gpt2'\] is a list where one value is "
                                           r"expected; pass one of them \(to compare several tokenizers"),
    (lambda: embscope.extend("smollm2-135m", "medical", top=2.5), r"top=2.5 must be a whole number \(int\); pass "
                                                                  r"e.g. top=200$"),
    (lambda: embscope.extend("smollm2-135m", "medical", top="10"), r"top='10' is a string; pass the number itself, "
                                                                   r"top=10$"),
    (lambda: embscope.extend("smollm2-135m", "medical", top=True), r"top=True must be a whole number \(int\), not a "
                                                                   r"bool"),
    (lambda: embscope.scan("minilm-l6", threshold="high"), r"threshold='high' must be a number, not a string; pass "
                                                           r"e.g. threshold=4.0$"),
    (lambda: embscope.scan("minilm-l6", out=123), r"out=123 must be a string or a path or DEFAULT_OUT or None, not int"),
    (lambda: embscope.check("smollm2-135m", None), r"^check\(\): data=None must be .*a list of strings or paths, "
                                                   r"not None$"),
    (lambda: embscope.check("smollm2-135m"), r"^check\(\): missing a required argument: 'data'"),
    (lambda: embscope.rope(None), r"^rope\(\): model=None must be a string, not None$"),
    (lambda: embscope.rope({}), r"^rope\(\): model=\{\} must be a string, not dict$"),
    (lambda: embscope.load_model(b"smollm2-135m"), r"^load_model\(\): spec=b'smollm2-135m' must be a string, not "
                                                   r"bytes; pass spec='smollm2-135m'$"),
    (lambda: embscope.audit("smollm2-135m", corpora="medical"), r"^audit\(\): corpora='medical' is one string where "
                                                                r"a list is expected; pass corpora=\['medical'\]$"),
    (lambda: embscope.audit("smollm2-135m", corpora="."), r"corpora='.' is one string where a list is expected"),
    (lambda: embscope.compare("gpt2"), r"^compare\(\): tokenizers='gpt2' is one string where a list is expected; "
                                       r"pass tokenizers=\['gpt2'\]$"),
    (lambda: embscope.scan("minilm-l6", limits="top=5"), r"limits='top=5' is one string where a list is expected"),
    (lambda: embscope.run("minilm-l6", sections="context"), r"^run\(\): sections='context' is one string where a "
                                                            r"list is expected; pass sections=\['context'\]$"),
    (lambda: embscope.audit("smollm2-135m", init="mean"), r"init='mean' is one string where a list is expected"),
    (lambda: embscope.scan("minilm-l6", unused_ids=[1, 2.5]), r"unused_ids=\[1, 2.5\] must be a list of whole "
                                                              r"numbers or None"),
])
def test_a_wrong_type_is_one_line_before_any_work(call, message, no_work):
    with pytest.raises(ArgumentError, match=message) as e:
        call()
    assert "\n" not in str(e.value)
    assert isinstance(e.value, SpecError) and isinstance(e.value, TypeError)


def test_a_loaded_tokenizer_or_model_object_is_refused_naming_its_folder(no_work):
    """transformers objects in place of a spec: the message names the folder they came from."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from embscope.models.resolve import resolve

    folder = str(resolve("minilm-l6").path)
    tok = AutoTokenizer.from_pretrained(folder)
    with pytest.raises(ArgumentError, match=rf"tokenizer=.* is a loaded {type(tok).__name__} object, not a name; "
                                            rf"embscope reads models itself: pass tokenizer='{folder}'$"):
        embscope.fertility(tok)
    model = AutoModel.from_config(AutoConfig.from_pretrained(folder))  # random weights, no file named
    with pytest.raises(ArgumentError, match=r"^scan\(\): model=<BertModel object> is a loaded BertModel object, not a name; embscope reads "
                                            r"models itself: pass model="):
        embscope.scan(model)


def test_an_array_of_ids_names_tolist(no_work):
    import numpy as np

    with pytest.raises(ArgumentError, match=r"unused_ids=.* must be a list; pass unused_ids=ARRAY.tolist\(\)$"):
        embscope.scan("minilm-l6", unused_ids=np.array([1, 2]))


def test_right_types_pass_including_numpy_numbers_and_paths(tmp_path):
    """What the annotations allow goes through: numpy integers for ints, ints for floats, a Path
    where a path is expected, tuples for lists (the run itself is the reference: it finishes)."""
    import numpy as np

    res = embscope.scan("minilm-l6", scan=False, k=np.int64(5), threshold=4, limits=("file-bytes=8G",),
                        unused_ids=(1, np.int32(2)), out=tmp_path / "s")
    assert res.folder == tmp_path / "s" and res.summary.parameters.scan.k == 5
    assert embscope.rope("smollm2-135m").kv_bytes_per_token == 30 * 3 * 64 * 2 * 2


def _public_api():
    import embscope.api

    return [getattr(embscope.api, n) for n in embscope.api.__all__ if inspect.isfunction(getattr(embscope.api, n))]


@pytest.mark.parametrize("fn", _public_api(), ids=lambda f: f.__name__)
def test_every_annotated_parameter_is_checked(fn):
    """Each API function's parameters, by their annotation: an int passed where only strings or
    lists are taken (or a string where only numbers/bools are) is refused before the body runs, so
    a parameter added later is checked by being annotated."""
    from embscope.arguments import _fits, _hints

    inner = inspect.unwrap(fn)
    hints = _hints(inner)
    sig = inspect.signature(inner)
    required = {n: "x" if _fits("x", hints[n]) else ["x"]
                for n, p in sig.parameters.items() if p.default is p.empty and p.kind is not p.VAR_KEYWORD}
    checked = 0
    for name, param in sig.parameters.items():
        hint = hints.get(name)
        if hint is None:
            continue
        members = typing.get_args(hint) or (hint,)
        wrong = object()  # fits no annotation but Any
        if typing.Any in members:
            continue
        args = {**required, name: wrong}
        with pytest.raises(ArgumentError, match=rf"^{fn.__name__}\(\): {name}="):
            fn(**args)
        checked += 1
    assert checked >= 1
