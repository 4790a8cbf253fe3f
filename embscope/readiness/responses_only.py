"""Unsloth's responses-only training (``--trainer unsloth --responses-only``): the labels TRL built,
kept only inside the assistant responses, found by their token markers.

``unsloth_zoo/dataset_utils.py`` ``train_on_responses_only(trainer, instruction_part, response_part)``
(opt-in, called on the trainer TRL built) rewrites the labels of the prepared dataset:

- each part is tokenized whole (``force_match=True``, the default): that is its *core*; when an
  edge token of it changes with the text that touches it (``_stable_marker_edges``: the part
  tokenized before and after ``\\``, ``{``, ``a``, ``A``, ``1``, ``(``, ``.``, ``<``, ``}``,
  ``>``) and an added token anchors what is left, the edge becomes an optional token around a
  shorter core;
- the tokens both cores start with, when all are special and one is not blank, are the *message
  start* (``<|im_start|>``);
- a response starts after each response core (and its optional tokens) and runs to the first of:
  the EOS (kept), a BOS, a message start or another response core (left out), the instruction core
  (left out), the end of the sequence;
- inside a response the labels are TRL's (a prompt-completion prompt stays out); elsewhere -100;
- a sequence left with no label is dropped (``_filter_fully_masked``).

Without explicit parts, ``get_chat_template_parts`` reads them off the chat template; for a template
with an assistant header (ChatML, Llama 3, Gemma, Qwen) that is the generation prompt
(``<|im_start|>assistant\\n``) and the text that opens a user turn after an assistant turn's
terminator (``<|im_start|>user\\n``): :func:`detect_parts` reads those; other templates need the
parts given (``--instruction-part``, ``--response-part``).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable

#: the characters a marker is tokenized beside to find its stable core (``_MARKER_EDGE_PROBES``)
EDGE_PROBES = ("\\", "{", "a", "A", "1", "(", ".", "<", "}", ">")
#: the drop this rule adds
DROP = "Unsloth's train_on_responses_only drops examples left with no label (no response marker found)"


@dataclass(frozen=True)
class Markers:
    """The token markers of the instruction and response parts (picklable)."""

    instruction: tuple
    instruction_left: tuple
    instruction_right: tuple
    response: tuple
    response_left: tuple
    response_right: tuple
    message_start: tuple
    bos: int | None
    eos: int | None


def _stable_edges(part: str, ids: list[int], encode: Callable[[str], list[int]]) -> tuple[int, int]:
    """(start, end) of the tokens of ``part`` that keep their ids whatever character touches it."""
    n = len(ids)
    start, end = 0, n
    for c in EDGE_PROBES:
        right = encode(part + c)
        k = 0
        while k < min(n, len(right)) and right[k] == ids[k]:
            k += 1
        end = min(end, k)
        left = encode(c + part)
        k = 0
        while k < min(n, len(left)) and left[len(left) - 1 - k] == ids[n - 1 - k]:
            k += 1
        start = max(start, n - k)
    return start, end


def core(part: str, encode: Callable[[str], list[int]], anchors: set[int]) -> tuple[list, list, list]:
    """(core, optional left, optional right) ids of a marker (``_find_common_token_ids`` with
    ``force_match``); ``anchors``: the added tokens whose text is not blank."""
    ids = encode(part)
    if not ids:
        return [], [], []
    start, end = _stable_edges(part, ids, encode)
    if end > start and (start, end) != (0, len(ids)) and any(i in anchors for i in ids[start:end]):
        return ids[start:end], ids[:start], ids[end:]
    return ids, [], []


def markers(instruction: str, response: str, encode: Callable[[str], list[int]], *, added: dict[int, str],
            special: set[int], bos: int | None, eos: int | None) -> Markers:
    """The :class:`Markers` of the two parts; ``added``: added token id → text, ``special``: the
    special ids (added ones flagged special, and BOS/EOS/PAD/UNK)."""
    from embscope.errors import SpecError

    anchors = {i for i, t in added.items() if t.strip()}
    q, ql, qr = core(instruction, encode, anchors)
    a, al, ar = core(response, encode, anchors)
    if not q or not a:
        raise SpecError(f"--{'instruction' if not q else 'response'}-part tokenizes to nothing; pass a marker the "
                        "chat template writes")
    if a == q[:len(a)] and ar:  # a core cut to the opener every role shares: keep its right edge
        a, ar = a + ar, []
    if q == a[:len(q)] and qr:
        q, qr = q + qr, []
    start = []
    for x, y in zip(q, a):
        if x != y:
            break
        start.append(x)
    if not all(i in special for i in start) or not any(added.get(i, "").strip() for i in start):
        start = []
    return Markers(tuple(q), tuple(ql), tuple(qr), tuple(a), tuple(al), tuple(ar), tuple(start), bos, eos)


def _at(ids: list[int], j: int, seq: tuple) -> bool:
    return bool(seq) and ids[j:j + len(seq)] == list(seq)


def spans(ids: list[int], m: Markers) -> list[tuple[int, int]]:
    """The response spans ``[start, end)`` of one sequence (see the module docstring)."""
    n, out, j = len(ids), [], 0
    while j < n:
        if _at(ids, j, m.response):
            k = j + len(m.response)
            for t in m.response_right:
                if k < n and ids[k] == t:
                    k += 1
                else:
                    break
            start = j = k
            while j < n:
                t = ids[j]
                if t == m.eos:
                    out.append((start, j + 1))
                    break
                if t == m.bos or _at(ids, j, m.message_start) or _at(ids, j, m.response):
                    out.append((start, j))
                    j -= 1
                    break
                if j == n - 1 or _at(ids, j, m.instruction):
                    end = j
                    if j != n - 1:
                        for left in reversed(m.instruction_left):
                            if end >= 1 and ids[end - 1] == left:
                                end -= 1
                            else:
                                break
                        j = j + len(m.instruction) - 1
                        for t2 in m.instruction_right:
                            if j + 1 < n and ids[j + 1] == t2:
                                j += 1
                            else:
                                break
                    else:
                        end = n
                    out.append((start, end))
                    break
                j += 1
        j += 1
    return out


def mask(ids: list[int], loss: list[bool] | None, m: Markers) -> list[bool]:
    """The loss mask after the rewrite: TRL's inside the response spans, False elsewhere."""
    out = [False] * len(ids)
    for a, b in spans(ids, m):
        for i in range(a, b):
            out[i] = True if loss is None else loss[i]
    return out


def detect_parts(render: Callable[[list, bool], str], specials: list[str]) -> tuple[str, str]:
    """(instruction part, response part) of a chat template with an assistant header, read as
    ``get_chat_template_parts`` reads them: the generation prompt (without the leading special
    tokens and whitespace the prompt-less rendering shares), and the most common text between an
    assistant reply and the next user message without the turn terminator in front of it."""
    from embscope.errors import SpecError

    u, a = "\u2060USERPROBE7q\u2060", "\u2060ASSTPROBE4z\u2060"
    convo = [{"role": "user", "content": u}, {"role": "assistant", "content": a}] * 3
    full = render(convo, False)

    def gap(after: str, before: str) -> str:
        ends = [x.end() for x in re.finditer(re.escape(after), full)]
        starts = [x.start() for x in re.finditer(re.escape(before), full)]
        gaps = [full[e:min(s for s in starts if s >= e)] for e in ends if any(s >= e for s in starts)]
        return Counter(gaps).most_common(1)[0][0] if gaps else ""

    instr_gap, resp_gap = gap(a, u), gap(u, a)
    specials = sorted({s for s in specials if s}, key=len, reverse=True)
    on, off = render(convo[:-1], True), render(convo[:-1], False)
    tail_on, tail_off = on[on.rfind(u) + len(u):], off[off.rfind(u) + len(u):]
    while True:  # drop what both tails start with: the user turn's terminator
        w1, w2 = re.match(r"\s+", tail_on), re.match(r"\s+", tail_off)
        if w1 and w2 and w1.group() == w2.group():
            tail_on, tail_off = tail_on[w1.end():], tail_off[w2.end():]
            continue
        s = next((s for s in specials if tail_on.startswith(s)), None)
        if s and tail_off.startswith(s):
            tail_on, tail_off = tail_on[len(s):], tail_off[len(s):]
            continue
        break
    header = tail_on if on != off else ""
    if not header or not resp_gap.endswith(header) or len(header) >= len(resp_gap):
        raise SpecError("the chat template has no assistant header to read the response marker from; pass "
                        "--instruction-part and --response-part (as to Unsloth's train_on_responses_only)")
    terminator = resp_gap[:-len(header)]
    instruction = instr_gap
    while terminator and instruction.startswith(terminator):
        instruction = instruction[len(terminator):]
    return instruction.strip(" \t"), header.strip(" \t")
