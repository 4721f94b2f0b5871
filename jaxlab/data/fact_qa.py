r"""Synthetic fact QA with known answers, exposure counts, several valid answers and
synonyms: the test bed of G-NLL (:mod:`jaxlab.inference.g_nll`).

A world of ``E`` entities x ``R`` relations holds ``Q = E R`` questions
``BOS e r SEP`` (question ``q = e R + r``). Each question has 1 to ``K = 3`` valid
answers, each a sequence of 2 to 6 words (a uniform length) from ``W`` canonical words,
ended by ``EOS``:

* a share ``multi_share`` (default 20%) of the questions has 2 or 3 valid answers (even
  odds) with probabilities ``answer_probs = (0.6, 0.3, 0.1)`` cut to their number and
  renormalised (two answers: 2/3, 1/3): aleatoric uncertainty, where a greedy answer
  can be right while the model is unsure; the others have one answer. The valid answers
  of a question start with different words, so they differ.
* every word ``w`` has a synonym token ``w'``; an answer has two surface forms, the
  canonical one and the one whose first word is its synonym. Training statements use
  the synonym form with probability ``synonym_prob`` (default 0.3), so one answer is
  spread over two token sequences: what predictive entropy counts as two answers and
  semantic entropy, after :func:`canonicalize` (synonym -> canonical token, then exact
  match), as one.

Training statements (:func:`statements`) draw the entity with Zipf weight
``(rank + 1) ** -zipf_a`` and the relation uniformly, as
:func:`jaxlab.data.lm_tasks.fact_statements` does, so exposure counts span 0 to
hundreds; each statement draws one valid answer by its probability and a surface form.
A greedy answer is correct (:func:`is_correct`) if its canonical form equals one of the
question's valid answers.

Token layout (:class:`FactQA`): the five specials of :mod:`jaxlab.data.lm_tasks`, then
entities, relations, canonical words, synonym words.

Example:
  >>> world = fact_qa(jax.random.key(0), num_entities=200, num_relations=2, num_words=24)
  >>> data, counts = statements(jax.random.key(1), world, num=4000)
  >>> data.tokens.shape, counts.shape                  # (4000, 11), (400,)
  >>> tokenizer(world).decode(data.tokens[0])          # "<bos> e52 r0 <sep> w7' w21 w7 <eos>"
  >>> prompts = questions(world)                        # (400, 4): BOS e r SEP
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.lm_tasks import BOS, EOS, FIRST_SYMBOL, PAD, SEP, SeqData, Tokenizer

MAX_ANSWERS = 3  # K: valid answers per question at most
MAX_LEN = 6  # default longest answer, in words
PROMPT_LEN = 4  # BOS e r SEP


class FactQA(NamedTuple):
  """The world's answers. Question ``q = e * num_relations + r``.

  Attributes:
    words: ``(Q, K, max_len)`` canonical word indices ``0..W-1`` of each valid answer,
      ``-1`` past its length (and for absent answers).
    lengths: ``(Q, K)`` words per answer (0: no such answer).
    probs: ``(Q, K)`` answer probabilities (summing to 1; 0 for absent answers).
  """

  words: jax.Array
  lengths: jax.Array
  probs: jax.Array
  num_entities: int
  num_relations: int
  num_words: int
  max_len: int

  @property
  def num_questions(self) -> int:
    return self.num_entities * self.num_relations

  @property
  def word_token(self) -> int:
    """Token id of canonical word 0 (word ``w`` is ``word_token + w``)."""
    return FIRST_SYMBOL + self.num_entities + self.num_relations

  @property
  def synonym_token(self) -> int:
    """Token id of the synonym of word 0 (``synonym_token + w``)."""
    return self.word_token + self.num_words

  @property
  def vocab_size(self) -> int:
    return self.synonym_token + self.num_words

  @property
  def answer_tokens_len(self) -> int:
    """Tokens of the longest answer with its EOS (``max_len + 1``)."""
    return self.max_len + 1


def _positive(name: str, value, minimum: int = 1) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return value


def _share(name: str, value) -> float:
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
    raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
  return float(value)


def fact_qa(key: jax.Array, num_entities: int, num_relations: int, num_words: int, *,
            min_len: int = 2, max_len: int = MAX_LEN, multi_share: float = 0.2,
            answer_probs: tuple[float, ...] = (0.6, 0.3, 0.1)) -> FactQA:
  """A random world: every question's valid answers, their lengths and probabilities.

  Args:
    key: PRNG key.
    num_entities, num_relations: ``E`` and ``R`` (``Q = E R`` questions).
    num_words: ``W`` canonical words (each also has a synonym token); at least
      ``MAX_ANSWERS`` so the valid answers of a question start with different words.
    min_len, max_len: answer length range in words (uniform), EOS not counted.
    multi_share: share of questions with 2 or 3 valid answers.
    answer_probs: the probabilities of the first, second and third answer, cut to the
      number of valid answers and renormalised.
  """
  _positive("num_entities", num_entities), _positive("num_relations", num_relations)
  _positive("num_words", num_words, MAX_ANSWERS)
  _positive("min_len", min_len), _positive("max_len", max_len, min_len)
  _share("multi_share", multi_share)
  probs = np.asarray(answer_probs, np.float64)
  if probs.shape != (MAX_ANSWERS,) or np.any(probs <= 0):
    raise ValueError(f"answer_probs must be {MAX_ANSWERS} positive numbers, got {answer_probs!r}")
  q = num_entities * num_relations
  k_first, k_rest, k_len, k_multi, k_count = jax.random.split(key, 5)
  # first words distinct within a question: the first K of a random permutation
  first = jax.vmap(lambda k: jax.random.permutation(k, num_words)[:MAX_ANSWERS])(
      jax.random.split(k_first, q))
  rest = jax.random.randint(k_rest, (q, MAX_ANSWERS, max_len - 1), 0, num_words)
  words = jnp.concatenate([first[..., None], rest], -1)
  lengths = jax.random.randint(k_len, (q, MAX_ANSWERS), min_len, max_len + 1)
  multi = jax.random.uniform(k_multi, (q,)) < multi_share
  count = jnp.where(multi, jax.random.randint(k_count, (q,), 2, MAX_ANSWERS + 1), 1)
  present = jnp.arange(MAX_ANSWERS)[None, :] < count[:, None]
  lengths = jnp.where(present, lengths, 0)
  words = jnp.where(jnp.arange(max_len) < lengths[..., None], words, -1)
  p = jnp.where(present, jnp.asarray(probs, jnp.float32), 0.0)
  p = p / jnp.sum(p, -1, keepdims=True)
  return FactQA(words.astype(jnp.int32), lengths.astype(jnp.int32), p, num_entities,
                num_relations, num_words, max_len)


def _answer_rows(world: FactQA, words: jax.Array, lengths: jax.Array,
                 synonym: jax.Array) -> jax.Array:
  """Answer token rows ``(..., max_len + 1)``: words (the first as its synonym where
  ``synonym``), EOS, then PAD."""
  pos = jnp.arange(world.max_len + 1)
  first_offset = jnp.where(synonym, world.synonym_token, world.word_token)
  offset = jnp.where(pos == 0, first_offset[..., None], world.word_token)
  padded = jnp.concatenate([words, jnp.full((*words.shape[:-1], 1), -1, words.dtype)], -1)
  toks = jnp.where(pos < lengths[..., None], padded + offset, PAD)
  return jnp.where(pos == lengths[..., None], EOS, toks).astype(jnp.int32)


def _prompts(world: FactQA, q: jax.Array) -> jax.Array:
  e, r = q // world.num_relations, q % world.num_relations
  col = lambda v: jnp.full(q.shape, v, jnp.int32)  # noqa: E731
  return jnp.stack([col(BOS), FIRST_SYMBOL + e, FIRST_SYMBOL + world.num_entities + r,
                    col(SEP)], -1).astype(jnp.int32)


def statements(key: jax.Array, world: FactQA, num: int, *, zipf_a: float = 1.0,
               synonym_prob: float = 0.3) -> tuple[SeqData, jax.Array]:
  """``num`` training statements ``BOS e r SEP a_1 .. a_L EOS PAD ..``.

  The entity is drawn with weight ``(rank + 1) ** -zipf_a`` (entity ``e`` has rank ``e``),
  the relation uniformly, the answer by its probability, its first word as the synonym
  with probability ``synonym_prob``.

  Returns:
    :class:`~jaxlab.data.lm_tasks.SeqData` (``tokens (num, 4 + max_len + 1)``,
    ``loss_mask`` on the answer's tokens and its EOS, ``prompt_len = 4``) and each
    question's number of statements ``(Q,)``.
  """
  _positive("num", num)
  if not isinstance(zipf_a, (int, float)) or isinstance(zipf_a, bool) or zipf_a < 0:
    raise ValueError(f"zipf_a must be a number >= 0, got {zipf_a!r}")
  _share("synonym_prob", synonym_prob)
  k_e, k_r, k_a, k_s = jax.random.split(key, 4)
  logits = -zipf_a * jnp.log(jnp.arange(1, world.num_entities + 1, dtype=jnp.float32))
  e = jax.random.categorical(k_e, logits, shape=(num,))
  r = jax.random.randint(k_r, (num,), 0, world.num_relations)
  q = e * world.num_relations + r
  a = jax.random.categorical(k_a, jnp.log(world.probs[q]))  # log 0 = -inf: never drawn
  synonym = jax.random.uniform(k_s, (num,)) < synonym_prob
  answer = _answer_rows(world, world.words[q, a], world.lengths[q, a], synonym)
  tokens = jnp.concatenate([_prompts(world, q), answer], -1)
  length = world.lengths[q, a]
  pos = jnp.arange(tokens.shape[1] - 1)
  # position t predicts token t + 1: the answer's words and its EOS
  mask = (pos[None] >= PROMPT_LEN - 1) & (pos[None] < PROMPT_LEN + length[:, None])
  counts = jnp.bincount(q, length=world.num_questions)
  return SeqData(tokens, mask.astype(jnp.float32), PROMPT_LEN), counts


def questions(world: FactQA) -> jax.Array:
  """Every question's prompt ``BOS e r SEP``, ``(Q, 4)``, row ``q`` for question ``q``."""
  return _prompts(world, jnp.arange(world.num_questions))


def answer_tokens(world: FactQA) -> jax.Array:
  """The canonical token rows of every valid answer ``(Q, K, max_len + 1)``: words, EOS,
  PAD (an absent answer is all PAD but an EOS at 0, and never matches a decode that
  :func:`is_correct` checks, since a decode of one EOS has no words)."""
  return _answer_rows(world, world.words, world.lengths, jnp.zeros(world.lengths.shape, bool))


def canonical_map(world: FactQA) -> jax.Array:
  """``(vocab_size,)`` int32: each synonym token to its canonical word token, every other
  token to itself."""
  ids = jnp.arange(world.vocab_size, dtype=jnp.int32)
  return jnp.where(ids >= world.synonym_token, ids - world.num_words, ids)


def canonicalize(tokens: jax.Array, table: jax.Array) -> jax.Array:
  """``table[tokens]``: tokens mapped to their canonical ids (e.g. :func:`canonical_map`)."""
  return jnp.asarray(table)[tokens]


def is_correct(world: FactQA, decoded: jax.Array) -> jax.Array:
  """Whether each question's decoded answer is valid, ``(Q,)`` bool.

  Args:
    world: the world.
    decoded: ``(Q, T)`` answer tokens of question ``q`` in row ``q`` (as
      :func:`jaxlab.models.decoding.generate` returns them: PAD after the EOS),
      ``T >= max_len + 1``; tokens past ``max_len + 1`` must be PAD for a match.

  A decode matches an answer if its canonical tokens equal the answer's words, EOS and
  PAD; an answer that never emitted EOS matches nothing.
  """
  if decoded.ndim != 2 or decoded.shape[0] != world.num_questions:
    raise ValueError(f"decoded must be (num_questions={world.num_questions}, T), got "
                     f"{decoded.shape}")
  t = world.answer_tokens_len
  if decoded.shape[1] < t:
    raise ValueError(f"decoded must hold at least max_len + 1 = {t} tokens, got "
                     f"{decoded.shape[1]}")
  canon = canonicalize(decoded, canonical_map(world))
  head, tail = canon[:, :t], canon[:, t:]
  valid = world.lengths > 0
  match = jnp.all(head[:, None, :] == answer_tokens(world), -1) & valid
  return jnp.any(match, -1) & jnp.all(tail == PAD, -1)


def tokenizer(world: FactQA) -> Tokenizer:
  """Words ``e0.. r0.. w0.. w0'..`` for the world's tokens."""
  return Tokenizer([f"e{i}" for i in range(world.num_entities)]
                   + [f"r{i}" for i in range(world.num_relations)]
                   + [f"w{i}" for i in range(world.num_words)]
                   + [f"w{i}'" for i in range(world.num_words)])
