r"""Entity facts in two templates, grouped in domains (TRU's unlearning test bed).

A world of ``num_entities`` entities ``e0, e1, ...``, each in one of ``num_domains``
domains ``d0, d1, ...`` (round robin, so every domain has the same number of entities),
with ``num_relations`` attributes whose values are drawn uniformly from ``num_values``
value words ``v0, v1, ...``. Every fact ``(e, r) -> v`` is asked in two templates that
share no word but the entity's:

* template A: ``e ra<r>`` (entity first, relation word ``ra<r>``);
* template B: ``what rb<r> of e`` (entity last, another relation word ``rb<r>``: B stands
  in for a second language);

and every entity's domain is stated as ``e domain -> d``. Rows are
``PAD.. BOS question SEP answer EOS PAD..`` with the question left-padded to one prompt
length (:data:`PROMPT`, so every answer starts at the same position) and the answer
right-padded to :data:`ANSWER` words.

Answers are either the fact's value, or one of the unlearning targets:

* TRU's reasoning target: trace ``think e in d ; d restricted /think`` then response
  ``refuse ask d'`` (deny, offer a retained topic ``d'``) — :func:`tru_target`;
* the response alone (TRU without its reasoning trace) — :func:`tru_target` with
  ``reasoning=False``;
* ``idk`` ("I don't know" SFT) — :data:`IDK`.

:func:`classify` parses a generated answer as a well-formed ``answer`` (one value word,
then EOS), a well-formed ``refusal`` (``idk``, ``refuse ask <domain>``, or a complete
trace followed by it) or ``degenerate`` (anything else: no EOS, repetition, a mix).

Example:
  >>> world = make_world(jax.random.key(0), 32, 4, 2, 16)
  >>> tok = tokenizer(world)
  >>> q = question(world, 3, 1, "B")          # ('what', 'rb1', 'of', 'e3')
  >>> row, mask = encode(tok, q, [value_word(world, 3, 1)])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import numpy as np

from jaxlab.data.lm_tasks import BOS, EOS, PAD, SEP, Tokenizer

__all__ = ["ANSWER", "IDK", "PROMPT", "ROW", "TEMPLATES", "EntityWorld", "classify",
           "domain_word", "encode", "entity_word", "make_world", "question", "tokenizer",
           "tru_target", "value_word"]

TEMPLATES = ("A", "B")
PROMPT = 6  # PAD.. BOS <up to 4 question words> SEP
ANSWER = 12  # think e in d ; d restricted /think refuse ask d' EOS
ROW = PROMPT + ANSWER
IDK = ("idk",)
TRACE_OPEN, TRACE_CLOSE, REFUSE, ASK = "think", "/think", "refuse", "ask"
FUNCTION_WORDS = ("what", "of", "domain", "in", ";", "restricted", TRACE_OPEN, TRACE_CLOSE,
                  REFUSE, ASK, *IDK)


class EntityWorld(NamedTuple):
  """The facts: ``domains (E,)`` (entity -> domain) and ``values (E, R)`` (value index)."""

  domains: np.ndarray
  values: np.ndarray
  num_domains: int
  num_values: int


def _positive(name: str, value, minimum: int = 1) -> int:
  if not isinstance(value, int | np.integer) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return int(value)


def make_world(key: jax.Array, num_entities: int, num_domains: int, num_relations: int,
               num_values: int) -> EntityWorld:
  """Entities in domains round robin, values uniform (host-side numpy seeded from ``key``).

  Raises:
    ValueError: for a count < 1 (< 2 domains), or fewer entities than domains.
  """
  e = _positive("num_entities", num_entities)
  d = _positive("num_domains", num_domains, 2)
  r = _positive("num_relations", num_relations)
  v = _positive("num_values", num_values, 2)
  if e < d:
    raise ValueError(f"num_entities must be >= num_domains={d}, got {e}")
  rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
  return EntityWorld(np.arange(e) % d, rng.integers(0, v, (e, r)), d, v)


def entity_word(i: int) -> str:
  return f"e{i}"


def domain_word(d: int) -> str:
  return f"d{d}"


def value_word(world: EntityWorld, entity: int, relation: int) -> str:
  return f"v{int(world.values[entity, relation])}"


def tokenizer(world: EntityWorld) -> Tokenizer:
  """Entity, domain, relation (both templates), value and function words."""
  e, r = world.values.shape
  return Tokenizer([entity_word(i) for i in range(e)]
                   + [domain_word(i) for i in range(world.num_domains)]
                   + [f"ra{i}" for i in range(r)] + [f"rb{i}" for i in range(r)]
                   + [f"v{i}" for i in range(world.num_values)] + list(FUNCTION_WORDS))


def question(world: EntityWorld, entity: int, relation: int | None, template: str = "A"
             ) -> tuple[str, ...]:
  """The question words of fact ``(entity, relation)`` in ``template`` (``relation=None``:
  the domain statement ``e domain``)."""
  if template not in TEMPLATES:
    raise ValueError(f"template must be one of {TEMPLATES}, got {template!r}")
  e = entity_word(entity)
  if relation is None:
    return (e, "domain")
  return (e, f"ra{relation}") if template == "A" else ("what", f"rb{relation}", "of", e)


def tru_target(world: EntityWorld, entity: int, offer_domain: int, reasoning: bool = True
               ) -> tuple[tuple[str, ...], tuple[str, ...]]:
  """``(trace, response)``: ``think e in d ; d restricted /think`` and ``refuse ask d'``
  (the trace empty without ``reasoning``)."""
  d = domain_word(int(world.domains[entity]))
  trace = (TRACE_OPEN, entity_word(entity), "in", d, ";", d, "restricted", TRACE_CLOSE)
  return (trace if reasoning else ()), (REFUSE, ASK, domain_word(offer_domain))


def encode(tok: Tokenizer, words: Sequence[str], answer: Sequence[str],
           split: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """One row ``PAD.. BOS words SEP answer EOS PAD..`` of length :data:`ROW`.

  Args:
    tok: the world's tokenizer.
    words: question words (at most ``PROMPT - 2``).
    answer: answer words (at most ``ANSWER - 1``); EOS is appended.
    split: the answer's first ``split`` words are its first part (TRU's reasoning trace),
      the rest and EOS its second part (the response); default: all of it is the second.

  Returns:
    ``(tokens (ROW,), first (ROW - 1,), second (ROW - 1,))``: int32 ids and float masks of
    the positions predicting the answer's first and second part (next-token convention:
    mask position ``t`` weighs the prediction of ``tokens[t + 1]``).
  """
  if len(words) > PROMPT - 2 or len(answer) > ANSWER - 1:
    raise ValueError(f"question has at most {PROMPT - 2} words and answer {ANSWER - 1}, got "
                     f"{len(words)} and {len(answer)}")
  split = 0 if split is None else split
  if not 0 <= split <= len(answer):
    raise ValueError(f"split must be in [0, {len(answer)}], got {split}")
  prompt = [PAD] * (PROMPT - 2 - len(words)) + [BOS, *tok.encode(" ".join(words)), SEP]
  full = prompt + [*(tok.encode(" ".join(answer)) if answer else []), EOS]
  row = np.full(ROW, PAD, np.int32)
  row[:len(full)] = full
  first, second = np.zeros(ROW - 1, np.float32), np.zeros(ROW - 1, np.float32)
  first[PROMPT - 1:PROMPT - 1 + split] = 1.0
  second[PROMPT - 1 + split:len(full) - 1] = 1.0
  return row, first, second


def classify(words: Sequence[str], ended: bool, num_domains: int) -> str:
  """``"answer"``, ``"refusal"`` or ``"degenerate"`` for a generated answer.

  Args:
    words: the generated words before EOS.
    ended: whether EOS was generated (an answer that never ends is degenerate).
    num_domains: domain words are ``d0 .. d<num_domains - 1>``.

  Returns:
    ``"answer"`` for exactly one value word; ``"refusal"`` for ``idk``, ``refuse ask <d>``
    or ``think <e> in <d> ; <d> restricted /think refuse ask <d'>`` (the trace's two
    domain words equal); ``"degenerate"`` otherwise.
  """
  w = tuple(words)
  domains = {domain_word(i) for i in range(num_domains)}
  if not ended:
    return "degenerate"
  if len(w) == 1 and w[0].startswith("v") and w[0][1:].isdigit():
    return "answer"
  if w == IDK:
    return "refusal"
  response = lambda s: len(s) == 3 and s[:2] == (REFUSE, ASK) and s[2] in domains  # noqa: E731
  if response(w):
    return "refusal"
  if (len(w) == 11 and w[0] == TRACE_OPEN and w[1].startswith("e") and w[1][1:].isdigit()
      and w[2] == "in" and w[3] in domains and w[4] == ";" and w[5] == w[3]
      and w[6:8] == ("restricted", TRACE_CLOSE) and response(w[8:])):
    return "refusal"
  return "degenerate"
