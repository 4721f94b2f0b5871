r"""Synthetic text: documents from random sparse Markov chains, generated offline from a key.

Built so that a model's memory of *which* batches it saw can be measured at a
tiny scale (training re-evaluation curves, :mod:`jaxlab.trec`). Every training
step draws its own *document*: a random sparse bigram chain ``D_t`` over
``vocab_size`` tokens (each token has ``branching`` successors with
``Dirichlet(1)`` weights). Each next token comes from a mixture of that document chain and one
shared *global* chain ``G``:

.. math::
  p(x_{i+1} = b \mid x_i = a) = \pi\, G_{ab} + (1 - \pi)\, D_{t,ab}

The global part is the same at every step (what a model learns for good), the
document part is specific to step ``t``: the final weights fit batch ``t``
only as far as they still remember it. With i.i.d. batches from one stationary
distribution the curve would be flat.

A *high-quality domain* is one more fixed chain ``H`` (the same mixture with
``D_t`` replaced by ``H``); :func:`step_batches` can fill a contiguous slice of
steps with it, and :func:`sample_sequences` draws held-out evaluation text.

Everything is jittable and vmappable (the slice start may be traced).

Example:
  >>> spec = MarkovTextSpec(vocab_size=64)
  >>> chains = make_chains(jax.random.key(0), spec)
  >>> batches = step_batches(jax.random.key(1), chains, spec, num_steps=100, batch_size=8,
  ...                        length=33, hq_start=80, hq_length=10)   # (100, 8, 33) int32
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


def sparse_chain(key: jax.Array, vocab_size: int, branching: int) -> jax.Array:
  """A random ``(V, V)`` transition matrix with ``branching`` nonzeros per row.

  Each row picks ``branching`` distinct successors uniformly (the top-k of
  uniform noise) and weights them with ``Dirichlet(1)`` (normalized
  exponentials; cheaper than ``jax.random.dirichlet``'s gamma sampler).
  """
  k_succ, k_w = jax.random.split(key)
  _, succ = jax.lax.top_k(jax.random.uniform(k_succ, (vocab_size, vocab_size)), branching)
  e = jax.random.exponential(k_w, (vocab_size, branching))
  w = e / e.sum(axis=1, keepdims=True)
  rows = jnp.arange(vocab_size)[:, None]
  return jnp.zeros((vocab_size, vocab_size)).at[rows, succ].set(w)


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
                 batch_size: int, length: int, hq_start: ArrayLike = 0,
                 hq_length: ArrayLike = 0) -> jax.Array:
  """The training stream: one batch per step, step ``t`` from its own document chain.

  Steps ``hq_start <= t < hq_start + hq_length`` draw from the high-quality
  chain instead (the curriculum slice); ``hq_length=0`` gives none. The
  document of step ``t`` depends only on ``(key, t)``, so two streams with the
  same key differ only inside their slices.

  Args:
    key: PRNG key of the stream.
    chains: :func:`make_chains` output.
    spec: the corpus.
    num_steps: number of batches ``T``.
    batch_size: sequences per batch.
    length: tokens per sequence.
    hq_start: first step of the high-quality slice (may be traced).
    hq_length: number of high-quality steps (may be traced).

  Returns:
    int32 ``(num_steps, batch_size, length)``.
  """
  def one(t):
    k_doc, k_tok = jax.random.split(jax.random.fold_in(key, t))
    in_slice = (t >= hq_start) & (t < hq_start + hq_length)
    doc = jnp.where(in_slice, chains.hq_chain, document_chain(k_doc, spec))
    return sample_sequences(k_tok, mixture(chains, doc, spec), batch_size, length)

  return jax.lax.map(one, jnp.arange(num_steps))
