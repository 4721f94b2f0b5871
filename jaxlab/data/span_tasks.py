r"""Prompts answered by several independent spans, with gold plans (Planned Diffusion's
test bed).

A prompt lists ``K`` digits (``1 <= K <= max_spans``); the answer has one span per digit,
independent of the others: the digit's English word spelled letter by letter, forward
then backward (``3 -> t h r e e e e r h t``), so a span is long next to the four plan
tokens that announce it, as a paragraph is next to its plan in the paper. The word
lengths 3 to 5 make the spans 6, 8 or 10 letters.

Three views of the same problems (:func:`span_problems` draws them):

* :func:`planned_sequences`: Planned Diffusion's format. After the prompt, a plan of one
  ``<promise>-<topic> d n </topic>`` per span (topic: the digit; ``n``: the span's length
  in units of ``unit`` tokens, rounded up), then one ``<async> .. </async>`` block per
  span holding its letters and ``n * unit - letters`` filler tokens ``_``, then EOS (the
  paper's ``<|im_end|>``). Rows are right-padded with PAD.
* :func:`answer_sequences`: the plain answer for the autoregressive and the pure
  masked-diffusion baselines: the spans' letters separated by ``|``, then EOS, then PAD.
* :func:`gold_words`: the spans as strings, for exact match.

Prompts have a fixed length: ``BOS``, ``max_spans`` slots (a digit, or the blank ``.``
when the prompt has fewer spans), ``SEP``; so a batch shares one prompt length and one
compiled decoder.

The paper's length unit is 10 tokens (its spans run to hundreds of tokens); with spans of
6 to 10 letters we use ``unit = 4`` by default (2 or 3 units per span, 0 to 2 filler
tokens).

Example:
  >>> digits = span_problems(jax.random.key(0), num=4, max_spans=3)
  >>> seqs = planned_sequences(np.asarray(digits), unit=4)
  >>> TOKENIZER.decode(seqs.tokens[0])
  '<bos> 3 7 . <sep> <promise>-<topic> 3 3 </topic> <promise>-<topic> 7 3 </topic> <async> ...'

References:
  "Planned Diffusion", arXiv:2510.18087, 2025 (the plan format).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.lm_tasks import BOS, EOS, MASK, PAD, SEP, Tokenizer

WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
LETTERS = tuple(sorted(set("".join(WORDS))))
NUMERALS = tuple(str(d) for d in range(10))
FILLER, SEPARATOR, BLANK = "_", "|", "."
PROMISE, END_TOPIC, ASYNC, END_ASYNC, SYNC = (
    "<promise>-<topic>", "</topic>", "<async>", "</async>", "<sync/>")
CONTROL = (PROMISE, END_TOPIC, ASYNC, END_ASYNC, SYNC)

TOKENIZER = Tokenizer(NUMERALS + LETTERS + (FILLER, SEPARATOR, BLANK) + CONTROL)
_ID = {w: i for i, w in enumerate(TOKENIZER.words)}
NUMERAL_IDS = tuple(_ID[n] for n in NUMERALS)
LETTER_IDS = {c: _ID[c] for c in LETTERS}
FILLER_ID, SEPARATOR_ID, BLANK_ID = _ID[FILLER], _ID[SEPARATOR], _ID[BLANK]
PROMISE_ID, END_TOPIC_ID, ASYNC_ID, END_ASYNC_ID, SYNC_ID = (_ID[c] for c in CONTROL)
__all__ = ["BOS", "EOS", "MASK", "PAD", "SEP", "TOKENIZER", "PlannedSeqs", "answer_sequences",
           "gold_words", "planned_sequences", "span_problems", "span_text", "span_units"]


def _positive(name: str, value, minimum: int = 1) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return value


def span_text(digit: int) -> str:
  """The span of ``digit``: its word spelled forward then backward (no spaces)."""
  word = WORDS[int(digit)]
  return word + word[::-1]


def span_units(digit: int, unit: int) -> int:
  """The span's length in units of ``unit`` tokens, rounded up (what the plan states)."""
  return -(-len(span_text(digit)) // unit)


def span_problems(key: jax.Array, num: int, max_spans: int, min_spans: int = 1,
                  num_spans: int | None = None) -> jax.Array:
  """``num`` problems: digits ``(num, max_spans)`` int32, uniform over 0..9, with ``-1``
  in the slots past each row's span count ``K ~ U{min_spans..max_spans}`` (or exactly
  ``num_spans``). Jittable with the sizes static."""
  _positive("num", num), _positive("max_spans", max_spans), _positive("min_spans", min_spans)
  if min_spans > max_spans:
    raise ValueError(f"min_spans must be <= max_spans, got {min_spans} > {max_spans}")
  if num_spans is not None and not (isinstance(num_spans, int)
                                    and min_spans <= num_spans <= max_spans):
    raise ValueError(f"num_spans must be an int in [min_spans, max_spans] = "
                     f"[{min_spans}, {max_spans}], got {num_spans!r}")
  k_d, k_k = jax.random.split(key)
  digits = jax.random.randint(k_d, (num, max_spans), 0, 10)
  if num_spans is None:
    count = jax.random.randint(k_k, (num, 1), min_spans, max_spans + 1)
  else:
    count = jnp.full((num, 1), num_spans)
  return jnp.where(jnp.arange(max_spans) < count, digits, -1).astype(jnp.int32)


def _check_digits(digits) -> np.ndarray:
  d = np.asarray(digits)
  if d.ndim != 2 or not np.issubdtype(d.dtype, np.integer):
    raise TypeError(f"digits must be an int array (num, max_spans), got {d.dtype} {d.shape}")
  if np.any((d < -1) | (d > 9)) or np.any((d[:, :-1] < 0) & (d[:, 1:] >= 0)):
    raise ValueError("digits must hold 0..9 then -1 padding in each row")
  if np.any(d[:, 0] < 0):
    raise ValueError("every row of digits needs at least one span")
  return d


def _prompt(row: np.ndarray) -> list[int]:
  return [BOS] + [NUMERAL_IDS[d] if d >= 0 else BLANK_ID for d in row] + [SEP]


def gold_words(digits) -> list[list[str]]:
  """Each row's spans as strings (``span_text`` of its digits)."""
  return [[span_text(d) for d in row if d >= 0] for row in _check_digits(digits)]


class PlannedSeqs(NamedTuple):
  """Planned-Diffusion rows ``tokens (N, T)`` (right-padded with PAD), each row's length
  ``lengths (N,)`` (PAD excluded) and the shared ``prompt_len``."""

  tokens: np.ndarray
  lengths: np.ndarray
  prompt_len: int


def planned_sequences(digits, unit: int = 4, length: int | None = None) -> PlannedSeqs:
  """The prompt, the gold plan, the async blocks and EOS, per row (see the module
  docstring). ``length``: pad every row to this many tokens (default: the longest row's
  length for ``max_spans`` spans of the longest word, so the shape depends only on
  ``max_spans`` and ``unit``)."""
  d = _check_digits(digits)
  _positive("unit", unit)
  if max(span_units(x, unit) for x in range(10)) > 9:
    raise ValueError(f"unit={unit} makes a span longer than 9 units (one numeral token)")
  k = d.shape[1]
  longest = max(span_units(x, unit) for x in range(10)) * unit
  full = (k + 2) + 4 * k + k * (longest + 2) + 1
  length = full if length is None else _positive("length", length)
  rows = []
  for row in d:
    plan, blocks = [], []
    for x in row[row >= 0]:
      n = span_units(x, unit)
      letters = [LETTER_IDS[c] for c in span_text(x)]
      plan += [PROMISE_ID, NUMERAL_IDS[x], NUMERAL_IDS[n], END_TOPIC_ID]
      blocks += [ASYNC_ID] + letters + [FILLER_ID] * (n * unit - len(letters)) + [END_ASYNC_ID]
    rows.append(_prompt(row) + plan + blocks + [EOS])
  if max(map(len, rows)) > length:
    raise ValueError(f"length={length} is shorter than the longest row ({max(map(len, rows))})")
  tokens = np.full((len(rows), length), PAD, np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)] = r
  return PlannedSeqs(tokens, np.array([len(r) for r in rows], np.int32), k + 2)


def answer_sequences(digits) -> tuple[np.ndarray, np.ndarray, int]:
  """The plain answers ``BOS slots SEP letters | letters .. EOS PAD..``: returns
  ``(tokens (N, T), loss_mask (N, T - 1), prompt_len)``, ``loss_mask`` marking the
  next-token positions of the answer (EOS included) as
  :class:`jaxlab.data.lm_tasks.SeqData` does. ``T`` fits ``max_spans`` spans of the
  longest word."""
  d = _check_digits(digits)
  k = d.shape[1]
  longest = max(len(span_text(x)) for x in range(10))
  length = (k + 2) + k * (longest + 1)
  tokens = np.full((d.shape[0], length), PAD, np.int32)
  loss_mask = np.zeros((d.shape[0], length - 1), np.float32)
  for i, row in enumerate(d):
    spans = [[LETTER_IDS[c] for c in span_text(x)] for x in row[row >= 0]]
    answer = sum(([SEPARATOR_ID] + s for s in spans[1:]), spans[0]) + [EOS]
    r = _prompt(row) + answer
    tokens[i, :len(r)] = r
    loss_mask[i, k + 1:len(r) - 1] = 1.0
  return tokens, loss_mask, k + 2


def decode_answer(tokens) -> list[str]:
  """An answer's tokens (after the prompt) back to its spans: split at ``|``, stopped at
  the first EOS (or PAD); a token that is not a letter makes its span ``'?'``."""
  spans, cur = [], ""
  letters = {v: c for c, v in LETTER_IDS.items()}
  for t in np.asarray(tokens).reshape(-1):
    t = int(t)
    if t in (EOS, PAD):
      break
    if t == SEPARATOR_ID:
      spans.append(cur)
      cur = ""
    else:
      cur += letters.get(t, "?")
  return spans + [cur]


def decode_span(tokens) -> str:
  """A block's content back to its span: letters up to the filler, which must run to the
  end (a letter after a filler, or a non-letter, gives ``'?'``)."""
  letters = {v: c for c, v in LETTER_IDS.items()}
  out, ended = "", False
  for t in np.asarray(tokens).reshape(-1):
    t = int(t)
    if t == FILLER_ID:
      ended = True
    elif t in letters and not ended:
      out += letters[t]
    else:
      return "?"
  return out
