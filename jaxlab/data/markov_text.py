r"""Synthetic text: documents from random sparse Markov chains, generated offline from a key.

Built so that a model's memory of *which* batches it saw can be measured at a
tiny scale (training re-evaluation curves, :mod:`jaxlab.dynamics.trec`). Every training
step draws its own *document*: a random sparse bigram chain ``D_t`` over
``vocab_size`` tokens (each token has ``branching`` successors with
``Dirichlet(1)`` weights). Each next token comes from a mixture of that
document chain and one shared *global* chain ``G``:

.. math::
  p(x_{i+1} = b \mid x_i = a) = \pi\, G_{ab} + (1 - \pi)\, D_{t,ab}

The global part is the same at every step (what a model learns for good), the
document part is specific to step ``t``: the final weights fit batch ``t``
only as far as they still remember it. With i.i.d. batches from one stationary
distribution the curve would be flat.

A *high-quality domain* is one more fixed chain ``H`` (the same mixture with
``D_t`` replaced by ``H``); :func:`with_hq_slice` fills a contiguous slice of
steps of a stream with it, and :func:`hq_sequences` draws held-out text.

Everything is jittable and vmappable (the slice start and length may be traced).

Example:
  >>> spec = MarkovTextSpec(vocab_size=64)
  >>> chains = make_chains(jax.random.key(0), spec)
  >>> docs = step_batches(jax.random.key(1), chains, spec, num_steps=100, batch_size=8,
  ...                     length=33)                                  # (100, 8, 33) int32
  >>> batches = with_hq_slice(jax.random.key(2), chains, spec, docs, start=80, length=10,
  ...                         max_length=10)                           # steps 80..89 HQ
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


@dataclasses.dataclass(frozen=True)
class MarkovTextSpec:
  """Static description of the corpus (hashable)."""

  vocab_size: int = 64  # token ids 0..vocab_size-1
  branching: int = 3  # successors per token in a document (and the high-quality) chain
  global_branching: int = 8  # successors per token in the shared global chain
  global_prob: float = 0.5  # pi: probability that a token follows the global chain

  def __post_init__(self):
    if not isinstance(self.vocab_size, int) or self.vocab_size < 2:
      raise ValueError(f"vocab_size must be an int >= 2, got {self.vocab_size!r}")
    for name in ("branching", "global_branching"):
      value = getattr(self, name)
      if not isinstance(value, int) or not 1 <= value <= self.vocab_size:
        raise ValueError(f"{name} must be an int in [1, vocab_size={self.vocab_size}], "
                         f"got {value!r}")
    if not 0.0 <= self.global_prob <= 1.0:
      raise ValueError(f"global_prob must be in [0, 1], got {self.global_prob!r}")


class Chains(NamedTuple):
  """The corpus' fixed chains as row-stochastic ``(V, V)`` transition matrices."""

  global_chain: jax.Array  # G, shared by every step
  hq_chain: jax.Array  # H, the high-quality domain


def sparse_chain(key: jax.Array, vocab_size: int, branching: int,
                 num_rows: int | None = None) -> jax.Array:
  """A random ``(V, V)`` transition matrix with ``branching`` nonzeros per row.

  Each row picks ``branching`` distinct successors uniformly (the top-k of
  uniform noise) and weights them with ``Dirichlet(1)`` (normalized
  exponentials; cheaper than ``jax.random.dirichlet``'s gamma sampler).
  ``num_rows`` (default ``V``) rows of such sparse distributions, e.g. an HMM's
  emissions from its hidden states.
  """
  rows_n = vocab_size if num_rows is None else num_rows
  k_succ, k_w = jax.random.split(key)
  _, succ = jax.lax.top_k(jax.random.uniform(k_succ, (rows_n, vocab_size)), branching)
  e = jax.random.exponential(k_w, (rows_n, branching))
  w = e / e.sum(axis=1, keepdims=True)
  rows = jnp.arange(rows_n)[:, None]
  return jnp.zeros((rows_n, vocab_size)).at[rows, succ].set(w)


def make_chains(key: jax.Array, spec: MarkovTextSpec) -> Chains:
  """The global chain ``G`` and the high-quality chain ``H`` of a corpus."""
  k_g, k_h = jax.random.split(key)
  return Chains(sparse_chain(k_g, spec.vocab_size, spec.global_branching),
                sparse_chain(k_h, spec.vocab_size, spec.branching))


def document_chain(key: jax.Array, spec: MarkovTextSpec) -> jax.Array:
  """One step's document chain ``D_t``."""
  return sparse_chain(key, spec.vocab_size, spec.branching)


def sample_sequences(key: jax.Array, transition: jax.Array, num: int, length: int) -> jax.Array:
  """``num`` sequences of ``length`` tokens from a ``(V, V)`` chain; uniform first token.

  Returns:
    int32 ``(num, length)``.
  """
  k0, k_steps = jax.random.split(key)
  logp = jnp.log(transition)  # -inf off the support: never sampled

  def step(tok, k):
    nxt = jax.random.categorical(k, logp[tok]).astype(jnp.int32)
    return nxt, nxt

  first = jax.random.randint(k0, (num,), 0, transition.shape[0], jnp.int32)
  _, rest = jax.lax.scan(step, first, jax.random.split(k_steps, length - 1))
  return jnp.concatenate([first[:, None], rest.T], axis=1)


def mixture(chains: Chains, document: jax.Array, spec: MarkovTextSpec) -> jax.Array:
  """``pi G + (1 - pi) D``: the chain a batch is sampled from."""
  return spec.global_prob * chains.global_chain + (1.0 - spec.global_prob) * document


def hq_sequences(key: jax.Array, chains: Chains, spec: MarkovTextSpec, num: int,
                 length: int) -> jax.Array:
  """Text of the high-quality domain (``pi G + (1 - pi) H``), e.g. held-out evaluation."""
  return sample_sequences(key, mixture(chains, chains.hq_chain, spec), num, length)


def step_batches(key: jax.Array, chains: Chains, spec: MarkovTextSpec, num_steps: int,
                 batch_size: int, length: int) -> jax.Array:
  """The training stream: one batch per step, step ``t`` from its own document chain.

  The document of step ``t`` and its text depend only on ``(key, t)``.

  Args:
    key: PRNG key of the stream.
    chains: :func:`make_chains` output.
    spec: the corpus.
    num_steps: number of batches ``T``.
    batch_size: sequences per batch.
    length: tokens per sequence.

  Returns:
    int32 ``(num_steps, batch_size, length)``.
  """
  def one(t):
    k_doc, k_tok = jax.random.split(jax.random.fold_in(key, t))
    doc = document_chain(k_doc, spec)
    return sample_sequences(k_tok, mixture(chains, doc, spec), batch_size, length)

  return jax.lax.map(one, jnp.arange(num_steps))


def with_hq_slice(key: jax.Array, chains: Chains, spec: MarkovTextSpec, batches: jax.Array,
                  start: ArrayLike, length: ArrayLike, max_length: int) -> jax.Array:
  """``batches`` with steps ``start <= t < start + length`` replaced by high-quality text.

  The ``i``-th step of the slice gets the same high-quality batch wherever the
  slice starts (it depends only on ``(key, i)``), so placements of a slice
  differ in *when* the model sees that text, not in which text it sees.

  Args:
    key: PRNG key of the high-quality text.
    chains: :func:`make_chains` output.
    spec: the corpus.
    batches: int ``(T, B, L)`` stream (e.g. :func:`step_batches`).
    start: first step of the slice (may be traced).
    length: steps in the slice, ``0 <= length <= max_length`` (may be traced; 0: none).
    max_length: static bound on ``length``: the high-quality batches sampled.

  Returns:
    int32 ``(T, B, L)``.
  """
  _, batch_size, seq = batches.shape
  hq = jax.lax.map(lambda i: hq_sequences(jax.random.fold_in(key, i), chains, spec, batch_size,
                                          seq), jnp.arange(max_length))
  t = jnp.arange(batches.shape[0])
  in_slice = (t >= start) & (t < start + jnp.minimum(length, max_length))
  return jnp.where(in_slice[:, None, None], hq[jnp.clip(t - start, 0, max_length - 1)], batches)
