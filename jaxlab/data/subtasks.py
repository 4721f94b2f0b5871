"""Multi-subtask prompts with gold subtask spans (ATA's test bed, Parallel structure).

A prompt holds ``m`` independent subtasks ``<label> <op> d d d ;`` and then ``ANS``; the
answer gives each subtask in prompt order as ``<label> r r r``, separated by ``|``, then
EOS. Ops: ``copy``, ``rev`` (reverse), ``inc`` (+1 mod 10 per digit), ``sort``. Labels are
drawn without replacement from 8 letters, so a model trained with ``m <= 2`` has seen every
label (what changes at ``m = 3, 4`` is the number of subtasks, not the vocabulary). Digits
are drawn from a small pool (``digit_pool``) so that dormant subtasks share tokens with the
active one. Random runs of ``.`` filler tokens sit before, between and after the subtasks
(:func:`random_gaps`), so that a subtask's place cannot be read from a fixed offset and
every distance of the longest test row is seen in training.

Per-subtask grading (:func:`grade`): ``correct`` (label and digits exact), ``omitted`` (no
segment ``i`` before EOS), ``mixed`` (the digits equal the result of another (op, digits)
pair of the prompt: another subtask's answer, this op on another subtask's digits or another
op on these digits), ``wrong`` (anything else).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

LABELS = tuple("ABCDEFGH")
OPS = ("copy", "rev", "inc", "sort")
WORDS = ("<pad>", "<eos>", ".", ";", "|", "ANS", *LABELS, *OPS, *map(str, range(10)))
IDS = {w: i for i, w in enumerate(WORDS)}
PAD, EOS, FILL, SEMI, BAR, ANS = (IDS[w] for w in ("<pad>", "<eos>", ".", ";", "|", "ANS"))
VOCAB = len(WORDS)
DIGITS = 3
SUBTASK_TOKENS = DIGITS + 3  # label op d d d ;
SEGMENT_TOKENS = DIGITS + 2  # label r r r (| or EOS)


def prompt_len(m: int) -> int:
  return m * SUBTASK_TOKENS + 1


def answer_len(m: int) -> int:
  return m * SEGMENT_TOKENS


def apply_op(op: str, digits: tuple[int, ...]) -> tuple[int, ...]:
  """The result of ``op`` on ``digits``."""
  if op == "copy":
    return tuple(digits)
  if op == "rev":
    return tuple(reversed(digits))
  if op == "inc":
    return tuple((d + 1) % 10 for d in digits)
  if op == "sort":
    return tuple(sorted(digits))
  raise ValueError(f"op must be one of {OPS}, got {op!r}")


class Subtask(NamedTuple):
  label: str
  op: str
  digits: tuple[int, ...]


def sample_subtasks(rng: np.random.Generator, m: int, digit_pool: int = 6) -> list[Subtask]:
  """``m`` subtasks with distinct labels, random ops and digits from ``0..digit_pool-1``."""
  if not isinstance(m, int) or not 1 <= m <= len(LABELS):
    raise ValueError(f"m must be an int in [1, {len(LABELS)}], got {m!r}")
  if not isinstance(digit_pool, int) or not 1 <= digit_pool <= 10:
    raise ValueError(f"digit_pool must be an int in [1, 10], got {digit_pool!r}")
  labels = rng.choice(len(LABELS), m, replace=False)
  return [Subtask(LABELS[int(lab)], OPS[int(rng.integers(len(OPS)))],
                  tuple(int(d) for d in rng.integers(digit_pool, size=DIGITS)))
          for lab in labels]


def encode(tasks: list[Subtask], gaps) -> tuple[list[int], list[int], list[int]]:
  """``(prompt ids, span ids, answer ids)``: ``gaps[i]`` ``.`` tokens before subtask ``i``
  and ``gaps[m]`` before ``ANS`` (``len(gaps) == m + 1``); span id ``i`` over subtask
  ``i``'s 6 tokens (label to ``;``), ``-1`` elsewhere."""
  if len(gaps) != len(tasks) + 1 or min(gaps) < 0:
    raise ValueError(f"gaps must be m + 1 = {len(tasks) + 1} counts >= 0, got {list(gaps)}")
  prompt, span = [], []
  for i, t in enumerate(tasks):
    prompt += [FILL] * int(gaps[i]) + [IDS[t.label], IDS[t.op],
                                       *(IDS[str(d)] for d in t.digits), SEMI]
    span += [-1] * int(gaps[i]) + [i] * SUBTASK_TOKENS
  prompt += [FILL] * int(gaps[-1]) + [ANS]
  span += [-1] * (int(gaps[-1]) + 1)
  answer = []
  for i, t in enumerate(tasks):
    answer += [IDS[t.label], *(IDS[str(d)] for d in apply_op(t.op, t.digits))]
    answer.append(BAR if i < len(tasks) - 1 else EOS)
  return prompt, span, answer


def random_gaps(rng: np.random.Generator, m: int, fill: int) -> np.ndarray:
  """``fill`` filler tokens spread uniformly at random over the ``m + 1`` gaps."""
  return rng.multinomial(fill, np.full(m + 1, 1.0 / (m + 1)))


class Rows(NamedTuple):
  """Training rows ``(N, row_len)``, the loss mask over the answer ``(N, row_len - 1)``,
  the span ids ``(N, row_len)`` and each target's gold active subtask ``(N, row_len - 1)``
  (the query predicting a token of answer segment ``i`` has ``i``; ``-1`` elsewhere)."""

  tokens: np.ndarray
  mask: np.ndarray
  span_id: np.ndarray
  query_span: np.ndarray


def training_rows(rng: np.random.Generator, n: int, ms: tuple[int, ...], row_len: int,
                  digit_pool: int = 6) -> Rows:
  """``n`` rows with ``m`` drawn uniformly from ``ms``, each with a random number of ``.``
  tokens (so that the row fits ``row_len``) in random gaps, right-padded with PAD."""
  if row_len < prompt_len(max(ms)) + answer_len(max(ms)):
    raise ValueError(f"row_len={row_len} is shorter than the longest row "
                     f"{prompt_len(max(ms)) + answer_len(max(ms))}")
  tokens = np.full((n, row_len), PAD, np.int32)
  span = np.full((n, row_len), -1, np.int32)
  mask = np.zeros((n, row_len - 1), np.float32)
  qspan = np.full((n, row_len - 1), -1, np.int32)
  for r in range(n):
    m = int(ms[rng.integers(len(ms))])
    free = row_len - prompt_len(m) - answer_len(m)
    p, s, a = encode(sample_subtasks(rng, m, digit_pool),
                     random_gaps(rng, m, int(rng.integers(free + 1))))
    row = p + a
    tokens[r, :len(row)] = row
    span[r, :len(p)] = s
    mask[r, len(p) - 1:len(row) - 1] = 1.0
    qspan[r, len(p) - 1:len(row) - 1] = np.repeat(np.arange(m), SEGMENT_TOKENS)
  return Rows(tokens, mask, span, qspan)


class TestSet(NamedTuple):
  prompts: np.ndarray  # (N, P) filled to P tokens in random gaps
  span_id: np.ndarray  # (N, P)
  tasks: list  # list of list[Subtask]


def test_set(rng: np.random.Generator, n: int, m: int, prompt_length: int,
             digit_pool: int = 6) -> TestSet:
  """``n`` prompts of ``m`` subtasks, filled with ``.`` in random gaps to ``prompt_length``."""
  if prompt_length < prompt_len(m):
    raise ValueError(f"prompt_length={prompt_length} < {prompt_len(m)} for m={m}")
  prompts, spans, tasks = [], [], []
  for _ in range(n):
    ts = sample_subtasks(rng, m, digit_pool)
    p, s, _ = encode(ts, random_gaps(rng, m, prompt_length - prompt_len(m)))
    prompts.append(p), spans.append(s), tasks.append(ts)
  return TestSet(np.array(prompts, np.int32), np.array(spans, np.int32), tasks)


CATEGORIES = ("correct", "mixed", "wrong", "omitted")


def segments(tokens) -> list[list[int]]:
  """Generated ids up to the first EOS, split at ``|``."""
  out, cur = [], []
  for t in tokens:
    t = int(t)
    if t == EOS:
      break
    if t == BAR:
      out.append(cur)
      cur = []
    else:
      cur.append(t)
  if cur:
    out.append(cur)
  return out


def grade(tasks: list[Subtask], tokens) -> list[str]:
  """One category of :data:`CATEGORIES` per subtask of a generated answer."""
  segs = segments(tokens)
  results = {(a.op, b.digits): apply_op(a.op, b.digits) for a in tasks for b in tasks}
  results.update({(op, t.digits): apply_op(op, t.digits) for op in OPS for t in tasks})
  out = []
  for i, t in enumerate(tasks):
    if i >= len(segs):
      out.append("omitted")
      continue
    seg = segs[i]
    gold = [IDS[t.label], *(IDS[str(d)] for d in apply_op(t.op, t.digits))]
    if seg == gold:
      out.append("correct")
      continue
    digits = tuple(int(WORDS[x]) for x in seg[1:] if WORDS[x].isdigit())
    own = apply_op(t.op, t.digits)
    other = {v for k, v in results.items() if v != own}
    out.append("mixed" if len(digits) == DIGITS and digits in other else "wrong")
  return out
