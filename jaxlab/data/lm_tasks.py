r"""Synthetic corpora and tasks for small language models, with a tiny tokenizer.

Every generator takes a PRNG key and returns fixed-shape int32 token arrays (jittable,
vmappable over keys). Token ids share one layout: five special tokens
(:data:`PAD`, :data:`BOS`, :data:`SEP`, :data:`EOS`, :data:`MASK`), then the
task's symbols; :class:`Tokenizer` maps between ids and space-separated text.

Tasks (prompt ``BOS x SEP``, answer ``y EOS``; :class:`SeqData` marks the answer's
next-token positions in ``loss_mask``):

* :func:`sort_task`, :func:`reverse_task`: ``length`` digits in base ``base``
  (uniform); the answer is the sorted / reversed digits.
* :func:`modular_sum_task`: the answer is one symbol, the digits' sum mod ``modulus``
  (uniform over residues when the digits are uniform).
* :func:`latent_parity`: the AdaBack task. Prompt bits ``x_1..x_L``; a target
  ``y_1 z_1 .. y_L z_L`` with free bits ``y_i`` and ``z_i = z_{i-1} xor y_i xor x_i``
  (``z_0 = 0``); :func:`parity_reward` scores any completion as the paper does (0.1 for
  ``2L`` tokens, 0.9 more when every step is valid, 0 when unparsable). A random
  completion is valid with probability ``2^-L``.

Corpora:

* :func:`markov_domains` / :func:`domain_text`: ``D`` domains, each its own sparse
  bigram chain over the shared vocabulary (``branching`` successors per token,
  Dirichlet(1) weights); rows carry their domain label. :func:`entropy_rate` gives a
  chain's exact entropy rate, the cross-entropy floor of a model of that domain.
* :func:`hmm_text`: a hidden Markov model (``num_states`` hidden states with sparse
  emissions), text whose next token depends on an unobserved state.
* :func:`fact_world` / :func:`fact_statements`: entities x relations -> answers; the
  statements ``BOS e r SEP a EOS`` mention entity ``e`` with Zipf(``zipf_a``)
  frequency, so exposure counts span orders of magnitude (returned per entity).

Example:
  >>> data = sort_task(jax.random.key(0), num=512, length=6)
  >>> data.tokens.shape, data.loss_mask.shape     # (512, 15), (512, 14)
  >>> TOKENIZER_DIGITS.decode(data.tokens[0])     # '<bos> 3 1 4 1 5 9 <sep> 1 1 3 4 5 9 <eos>'
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.markov_text import sample_sequences, sparse_chain

SPECIALS = ("<pad>", "<bos>", "<sep>", "<eos>", "<mask>")
PAD, BOS, SEP, EOS, MASK = range(len(SPECIALS))
FIRST_SYMBOL = len(SPECIALS)  # id of symbol 0


class Tokenizer:
  """Word-level tokenizer: the five specials, then ``symbols`` (ids ``5, 6, ...``)."""

  def __init__(self, symbols: tuple[str, ...] | list[str]):
    symbols = tuple(str(s) for s in symbols)
    if len(set(symbols)) != len(symbols) or set(symbols) & set(SPECIALS) or not symbols:
      raise ValueError(f"symbols must be distinct, non-empty and not special, got {symbols!r}")
    self.words = SPECIALS + symbols
    self._ids = {w: i for i, w in enumerate(self.words)}

  @property
  def vocab_size(self) -> int:
    return len(self.words)

  def encode(self, text: str) -> np.ndarray:
    """Space-separated words to int32 ids; an unknown word raises ``ValueError``."""
    unknown = [w for w in text.split() if w not in self._ids]
    if unknown:
      raise ValueError(f"unknown words {unknown[:5]}; the vocabulary is {self.words}")
    return np.array([self._ids[w] for w in text.split()], np.int32)

  def decode(self, ids) -> str:
    """Ids to text (padding dropped)."""
    return " ".join(self.words[int(i)] for i in np.asarray(ids).reshape(-1) if int(i) != PAD)


def digits_tokenizer(base: int = 10) -> Tokenizer:
  """Symbols ``'0' .. str(base - 1)``: the algorithmic tasks' vocabulary."""
  return Tokenizer([str(d) for d in range(base)])


TOKENIZER_DIGITS = digits_tokenizer(10)
TOKENIZER_BITS = digits_tokenizer(2)


class SeqData(NamedTuple):
  """Token rows ``(N, T)`` and ``loss_mask (N, T - 1)``: 1 where position ``t`` predicts
  an answer token ``tokens[:, t + 1]`` (EOS included). ``prompt_len`` is the length of
  ``BOS x SEP`` (the same for every row)."""

  tokens: jax.Array
  loss_mask: jax.Array
  prompt_len: int


def _positive(name: str, value, minimum: int = 1) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
    raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
  return value


def _qa(x: jax.Array, y: jax.Array) -> SeqData:
  """``BOS x SEP y EOS`` rows from symbol indices ``x (N, Lx)`` and ``y (N, Ly)``."""
  n = x.shape[0]
  col = lambda v: jnp.full((n, 1), v, jnp.int32)
  tokens = jnp.concatenate([col(BOS), x + FIRST_SYMBOL, col(SEP), y + FIRST_SYMBOL, col(EOS)],
                           1).astype(jnp.int32)
  prompt = x.shape[1] + 2
  mask = (jnp.arange(tokens.shape[1] - 1) >= prompt - 1).astype(jnp.float32)
  return SeqData(tokens, jnp.broadcast_to(mask, (n, tokens.shape[1] - 1)), prompt)


def sort_task(key: jax.Array, num: int, length: int, base: int = 10) -> SeqData:
  """Uniform digits; the answer sorts them ascending."""
  _positive("num", num), _positive("length", length), _positive("base", base, 2)
  x = jax.random.randint(key, (num, length), 0, base)
  return _qa(x, jnp.sort(x, -1))


def reverse_task(key: jax.Array, num: int, length: int, base: int = 10) -> SeqData:
  """Uniform digits; the answer is them reversed."""
  _positive("num", num), _positive("length", length), _positive("base", base, 2)
  x = jax.random.randint(key, (num, length), 0, base)
  return _qa(x, x[:, ::-1])


def modular_sum_task(key: jax.Array, num: int, length: int, modulus: int = 10) -> SeqData:
  """Uniform digits in ``[0, modulus)``; the answer is their sum mod ``modulus``."""
  _positive("num", num), _positive("length", length), _positive("modulus", modulus, 2)
  x = jax.random.randint(key, (num, length), 0, modulus)
  return _qa(x, jnp.sum(x, -1, keepdims=True) % modulus)


def latent_parity(key: jax.Array, num: int, length: int, valid: bool = True) -> SeqData:
  """Prompt bits ``x``; one valid target ``y_1 z_1 .. y_L z_L`` per row (random ``y``).
  ``valid=False``: random ``z`` too, AdaBack's format warm-up data (right length and
  alphabet, reward 0.1 but for a 2^-L chance)."""
  _positive("num", num), _positive("length", length)
  kx, ky, kz = jax.random.split(key, 3)
  x = jax.random.randint(kx, (num, length), 0, 2)
  y = jax.random.randint(ky, (num, length), 0, 2)
  z = jnp.cumsum(x ^ y, -1) % 2  # z_i = z_{i-1} xor y_i xor x_i
  if not valid:
    z = jax.random.randint(kz, (num, length), 0, 2)
  return _qa(x, jnp.stack([y, z], -1).reshape(num, 2 * length))


def parity_reward(completion: jax.Array, x_bits: jax.Array) -> jax.Array:
  """AdaBack's reward of ``completion (N, C)`` (token ids after ``SEP``, up to EOS / padding)
  for prompt bits ``x_bits (N, L)``: ``0.1 [2L bit tokens] + 0.9 [every step valid]``,
  where step ``i`` is valid iff ``y_i xor z_i xor z_{i-1} = x_i`` (``z_0 = 0``); a
  completion with a non-bit token before its end scores 0."""
  n, length = x_bits.shape
  bits = completion - FIRST_SYMBOL
  is_bit = (bits == 0) | (bits == 1)
  end = jnp.argmax(~is_bit, -1)  # first non-bit token (EOS, PAD or junk)
  end = jnp.where(jnp.all(is_bit, -1), completion.shape[1], end)
  stop = jnp.take_along_axis(completion, jnp.minimum(end, completion.shape[1] - 1)[:, None],
                             -1)[:, 0]
  parsed = (end == completion.shape[1]) | (stop == EOS) | (stop == PAD)
  count_ok = end == 2 * length
  pad = jnp.zeros((n, max(2 * length - completion.shape[1], 0)), bits.dtype)
  pairs = jnp.concatenate([bits, pad], 1)[:, :2 * length].reshape(n, length, 2)
  y, z = pairs[..., 0], pairs[..., 1]
  z_prev = jnp.concatenate([jnp.zeros((n, 1), z.dtype), z[:, :-1]], 1)
  valid = jnp.all((y ^ z ^ z_prev) == x_bits, -1) & count_ok
  return jnp.where(parsed, 0.1 * count_ok + 0.9 * valid, 0.0).astype(jnp.float32)


# ---------------------------------------------------------------- corpora
def markov_domains(key: jax.Array, num_domains: int, vocab_size: int,
                   branching: int = 3) -> jax.Array:
  """``(D, V, V)`` sparse bigram chains over symbol indices ``0..V-1``, one per domain."""
  _positive("num_domains", num_domains), _positive("vocab_size", vocab_size, 2)
  _positive("branching", branching)
  if branching > vocab_size:
    raise ValueError(f"branching must be <= vocab_size={vocab_size}, got {branching}")
  keys = jax.random.split(key, num_domains)
  return jax.vmap(lambda k: sparse_chain(k, vocab_size, branching))(keys)


def domain_text(key: jax.Array, chains: jax.Array, num: int, length: int,
                domain_probs: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """``num`` rows ``BOS s_1 .. s_{length-1}`` (token ids), each from one domain's chain
  drawn from ``domain_probs`` (default uniform); returns ``(tokens (N, length),
  domains (N,))``."""
  _positive("num", num), _positive("length", length, 2)
  d = chains.shape[0]
  kd, ks = jax.random.split(key)
  logits = jnp.zeros(d) if domain_probs is None else jnp.log(jnp.asarray(domain_probs))
  domains = jax.random.categorical(kd, logits, shape=(num,))
  rows = jax.vmap(lambda k, c: sample_sequences(k, c, 1, length - 1)[0])(
      jax.random.split(ks, num), chains[domains])
  tokens = jnp.concatenate([jnp.full((num, 1), BOS), rows + FIRST_SYMBOL], 1)
  return tokens.astype(jnp.int32), domains


def entropy_rate(transition: jax.Array) -> jax.Array:
  """Exact entropy rate (nats per token) of a Markov chain ``P (V, V)``:
  ``-sum_a pi_a sum_b P_ab log P_ab`` with ``pi`` its stationary distribution."""
  p = np.asarray(transition, np.float64)
  vals, vecs = np.linalg.eig(p.T)
  pi = np.real(vecs[:, np.argmin(np.abs(vals - 1))])
  pi = pi / pi.sum()
  with np.errstate(divide="ignore", invalid="ignore"):
    row = -np.sum(np.where(p > 0, p * np.log(p), 0.0), 1)
  return jnp.asarray(float(pi @ row))


def hmm_text(key: jax.Array, num: int, length: int, num_states: int, vocab_size: int,
             emit_branching: int = 4) -> jax.Array:
  """Rows ``BOS s_1 ..`` from a random HMM: hidden states follow a sparse chain (3
  successors each), each state emits from its own ``emit_branching``-sparse distribution
  over ``vocab_size`` symbols. Returns ``(N, length)`` token ids; the key fixes both the
  HMM and the rows."""
  _positive("num", num), _positive("length", length, 2), _positive("num_states", num_states)
  _positive("vocab_size", vocab_size, 2), _positive("emit_branching", emit_branching)
  if emit_branching > vocab_size:
    raise ValueError(f"emit_branching must be <= vocab_size={vocab_size}, got {emit_branching}")
  k_trans, k_emit, k_rows = jax.random.split(key, 3)
  log_trans = jnp.log(sparse_chain(k_trans, num_states, min(3, num_states)))
  log_emit = jnp.log(sparse_chain(k_emit, vocab_size, emit_branching, num_rows=num_states))

  def row(k):
    k_init, k_steps = jax.random.split(k)

    def step(h, k):
      k_e, k_t = jax.random.split(k)
      return (jax.random.categorical(k_t, log_trans[h]),
              jax.random.categorical(k_e, log_emit[h]))

    h0 = jax.random.randint(k_init, (), 0, num_states)
    return jax.lax.scan(step, h0, jax.random.split(k_steps, length - 1))[1]

  symbols = jax.vmap(row)(jax.random.split(k_rows, num))
  return jnp.concatenate([jnp.full((num, 1), BOS), symbols + FIRST_SYMBOL], 1).astype(jnp.int32)


class FactWorld(NamedTuple):
  """``answers (E, R)``: the answer symbol of entity ``e`` under relation ``r``. Symbols:
  entities ``0..E-1``, relations ``E..E+R-1``, answers ``E+R..E+R+A-1``."""

  answers: jax.Array
  num_entities: int
  num_relations: int
  num_answers: int

  @property
  def num_symbols(self) -> int:
    return self.num_entities + self.num_relations + self.num_answers


def fact_world(key: jax.Array, num_entities: int, num_relations: int,
               num_answers: int) -> FactWorld:
  """Uniformly random answers per (entity, relation)."""
  for name, v in (("num_entities", num_entities), ("num_relations", num_relations),
                  ("num_answers", num_answers)):
    _positive(name, v)
  answers = jax.random.randint(key, (num_entities, num_relations), 0, num_answers)
  return FactWorld(answers, num_entities, num_relations, num_answers)


def fact_statements(key: jax.Array, world: FactWorld, num: int,
                    zipf_a: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """``num`` statements ``BOS e r SEP a EOS`` (ids) with entity ``e`` drawn with weight
  ``(rank + 1) ** -zipf_a`` and a uniform relation; returns ``(tokens (N, 6), counts (E,))``
  with each entity's number of mentions."""
  _positive("num", num)
  ke, kr = jax.random.split(key)
  e_count, r_count = world.num_entities, world.num_relations
  weights = -zipf_a * jnp.log(jnp.arange(1, e_count + 1, dtype=jnp.float32))
  e = jax.random.categorical(ke, weights, shape=(num,))
  r = jax.random.randint(kr, (num,), 0, r_count)
  a = world.answers[e, r]
  x = jnp.stack([e, e_count + r], -1)
  data = _qa(x, (e_count + r_count + a)[:, None])
  return data.tokens, jnp.bincount(e, length=e_count)


def fact_questions(world: FactWorld) -> SeqData:
  """Every (entity, relation) question with its answer, as :class:`SeqData` rows."""
  e, r = jnp.meshgrid(jnp.arange(world.num_entities), jnp.arange(world.num_relations),
                      indexing="ij")
  e, r = e.reshape(-1), r.reshape(-1)
  x = jnp.stack([e, world.num_entities + r], -1)
  a = world.num_entities + world.num_relations + world.answers[e, r]
  return _qa(x, a[:, None])
