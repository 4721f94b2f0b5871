r"""G-NLL: the negative log-likelihood of the greedy answer as an uncertainty score,
and the sampled baselines it is compared with.

Under the zero-one score the aleatoric uncertainty of an answer is ``1 - max_y p(y|x)``
(the maximum sequence probability, MSP). G-NLL estimates ``-log max_y p(y|x)`` by the
greedy decode ``\hat y`` (up to and including EOS), whose token-wise maxima approximate
the sequence maximum:

.. math::
  \mathrm{G\text{-}NLL}(x) = -\sum_{t=1}^{T} \log \max_v p(v \mid x, \hat y_{<t})
      = -\log p(\hat y \mid x),

with no length normalisation (the paper's point: dividing by ``T`` breaks the link to the
MSP). ``LN-G-NLL = G-NLL / T`` is kept for the ablation. It costs one greedy decode,
``T`` forward passes, which the answer needs anyway.

Baselines from ``N`` samples ``y^1..y^N`` at temperature 1 (the paper's N = 10):

.. math::
  \mathrm{PE} &= -\tfrac1N \textstyle\sum_n \log p(y^n|x), \qquad
  \mathrm{LN\text{-}PE} = -\tfrac1N \textstyle\sum_n \tfrac{1}{T_n} \log p(y^n|x), \\
  \mathrm{SE} &= -\textstyle\sum_c \hat p_c \log \hat p_c, \quad
  \hat p_c = \frac{\sum_{n \in c} p(y^n|x)}{\sum_n p(y^n|x)}, \qquad
  \mathrm{D\text{-}SE} = -\textstyle\sum_c \tfrac{N_c}{N} \log \tfrac{N_c}{N},

where the clusters ``c`` group samples with the same meaning. The paper clusters by
bidirectional entailment with an NLI model; our stand-in is a canonicalising map
(:func:`canonicalize`: a token table, e.g. synonym -> canonical word) followed by exact
match of the token sequences (:func:`cluster_ids`). A sample drawn twice counts twice
in ``\hat p_c`` (as in Farquhar et al.'s code). Each sample's cost is its length in
forward passes (prefill included, the step after EOS not needed), so the sampled scores
cost ``sum_n T_n`` passes, about ``N`` times G-NLL's.

Everything is batched over questions and jit-able (sizes static); the decodes are
:func:`jaxlab.models.decoding.generate` (greedy: ``temperature=0``, whose recorded
log-probabilities are ``log max_v p``) and :func:`~jaxlab.models.decoding.beam_search`
(:func:`beam_nll`: the "exact MSP" check, the best of ``beam_size`` beams).
:func:`auroc` scores how well an uncertainty separates incorrect from correct answers
(the Mann-Whitney statistic, ties counted one half).

Example:
  >>> out = g_nll(net, prompts, max_new_tokens=7, eos_id=EOS)          # (B,) scores
  >>> s = sample_answers(net, prompts, key, num_samples=10, max_new_tokens=7, eos_id=EOS)
  >>> lp = s.log_probs.sum(-1)                                            # (B, N)
  >>> pe = predictive_entropy(lp)
  >>> se = semantic_entropy(lp, cluster_ids(canonicalize(s.tokens, table)))
  >>> auroc(out.g_nll, incorrect)

References:
  Aichberger, Schweighofer, Hochreiter, "Rethinking Uncertainty Estimation in LLMs: A
  Principled Single-Sequence Measure" (G-NLL), arXiv:2412.15176, 2024. No code released:
  this is our implementation of the paper's definitions.
  Kuhn, Gal, Farquhar, "Semantic Uncertainty", arXiv:2302.09664, 2023; Farquhar et al.,
  "Detecting hallucinations in large language models using semantic entropy", Nature
  2024 (SE, D-SE).
  Malinin, Gales, "Uncertainty Estimation in Autoregressive Structured Prediction",
  arXiv:2002.07650, 2020 (PE, LN-PE).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.models import decoding

__all__ = ["GreedyNLL", "Samples", "auroc", "beam_nll", "canonicalize", "cluster_ids",
           "discrete_semantic_entropy", "g_nll", "ln_predictive_entropy", "predictive_entropy",
           "sample_answers", "semantic_entropy"]


class GreedyNLL(NamedTuple):
  """G-NLL of a batch of prompts.

  Attributes:
    g_nll: ``(B,)`` ``-log p(greedy answer | prompt)``, EOS included.
    ln_g_nll: ``(B,)`` ``g_nll / lengths`` (the length-normalised ablation).
    tokens: ``(B, N)`` the greedy answers (``pad_id`` after EOS).
    log_probs: ``(B, N)`` ``log max_v p`` per step (0 after EOS).
    lengths: ``(B,)`` tokens up to and including EOS (``N`` where none was emitted);
      also the decode's cost in forward passes.
  """

  g_nll: jax.Array
  ln_g_nll: jax.Array
  tokens: jax.Array
  log_probs: jax.Array
  lengths: jax.Array


class Samples(NamedTuple):
  """``N`` sampled answers per prompt: ``tokens`` and per-token ``log_probs``
  ``(B, N, T)`` (0 after EOS) and ``lengths (B, N)``, EOS included (each sample's cost in
  forward passes)."""

  tokens: jax.Array
  log_probs: jax.Array
  lengths: jax.Array


def _eos(eos_id: Any) -> int:
  if not isinstance(eos_id, (int, np.integer)) or isinstance(eos_id, bool) or eos_id < 0:
    raise ValueError(f"eos_id must be a token id (an int >= 0), got {eos_id!r}")
  return int(eos_id)


def g_nll(model: Any, prompt: jax.Array, max_new_tokens: int, *, eos_id: int,
          pad_id: int = 0) -> GreedyNLL:
  """G-NLL and LN-G-NLL of the greedy answers to ``prompt (B, T)``.

  Args:
    model: a :class:`jaxlab.nn.Net` holding a :class:`~jaxlab.models.transformer.Transformer`
      (or the module).
    prompt: int tokens ``(B, T)``.
    max_new_tokens: decoding steps; an answer without EOS in them is scored over all of
      them.
    eos_id: the end-of-sequence token (its log-probability is part of the score).
    pad_id: filler after EOS.

  Returns:
    :class:`GreedyNLL`.
  """
  gen = decoding.generate(model, prompt, jax.random.key(0), max_new_tokens, temperature=0.0,
                          eos_id=_eos(eos_id), pad_id=pad_id)
  nll = -jnp.sum(gen.log_probs, -1)  # log_probs are 0 after EOS
  return GreedyNLL(nll, nll / gen.lengths, gen.tokens, gen.log_probs, gen.lengths)


def sample_answers(model: Any, prompt: jax.Array, key: jax.Array, num_samples: int,
                   max_new_tokens: int, *, eos_id: int, temperature: float = 1.0,
                   pad_id: int = 0) -> Samples:
  """``num_samples`` answers per prompt at ``temperature`` (the paper's baselines: 1), in
  one batched decode of ``B * num_samples`` rows. The recorded log-probabilities are the
  model's at temperature 1 whatever ``temperature`` samples."""
  if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
    raise ValueError(f"num_samples must be a positive int, got {num_samples!r}")
  b = prompt.shape[0]
  gen = decoding.generate(model, jnp.repeat(prompt, num_samples, 0), key, max_new_tokens,
                          temperature=temperature, eos_id=_eos(eos_id), pad_id=pad_id)
  shape = (b, num_samples, max_new_tokens)
  return Samples(gen.tokens.reshape(shape), gen.log_probs.reshape(shape),
                 gen.lengths.reshape(b, num_samples))


def beam_nll(model: Any, prompt: jax.Array, beam_size: int, max_new_tokens: int, *,
             eos_id: int, pad_id: int = 0) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``-log p`` of the most likely answer beam search finds (the "exact MSP" check; G-NLL
  is never below it when the greedy path survives in the beam).

  Returns:
    ``(nll (B,), best tokens (B, N), passes (B,))``: ``passes`` is ``beam_size`` times the
    longest of the kept beams, the forward passes a beam search that stops when every beam
    has ended needs.
  """
  beams = decoding.beam_search(model, prompt, beam_size, max_new_tokens, eos_id=_eos(eos_id),
                               pad_id=pad_id)
  ended = jnp.cumsum(beams.tokens == eos_id, -1) > 0
  lengths = max_new_tokens - jnp.sum(ended, -1) + jnp.any(ended, -1)
  return -beams.scores[:, 0], beams.tokens[:, 0], beam_size * jnp.max(lengths, -1)


def canonicalize(tokens: jax.Array, table: jax.Array) -> jax.Array:
  """``table[tokens]``: every token replaced by its canonical id (the clustering's map)."""
  return jnp.asarray(table)[tokens]


def cluster_ids(tokens: jax.Array) -> jax.Array:
  """Exact-match clusters of ``tokens (..., N, T)``: ``(..., N)`` the index of the first
  sample with the same sequence (so equal ids <=> equal sequences)."""
  if tokens.ndim < 2:
    raise ValueError(f"tokens must be (..., N, T), got shape {tokens.shape}")
  same = jnp.all(tokens[..., :, None, :] == tokens[..., None, :, :], -1)  # (..., N, N)
  return jnp.argmax(same, -1).astype(jnp.int32)


def predictive_entropy(seq_log_probs: jax.Array) -> jax.Array:
  """``PE = -(1/N) sum_n log p(y^n|x)`` over the last axis of ``(..., N)``."""
  return -jnp.mean(seq_log_probs, -1)


def ln_predictive_entropy(seq_log_probs: jax.Array, lengths: jax.Array) -> jax.Array:
  """``LN-PE = -(1/N) sum_n log p(y^n|x) / T_n``."""
  return -jnp.mean(seq_log_probs / lengths, -1)


def _entropy_of_masses(log_mass: jax.Array) -> jax.Array:
  """``-sum p log p`` over the last axis, given ``log p`` (``-inf`` for empty entries)."""
  finite = jnp.isfinite(log_mass)
  safe = jnp.where(finite, log_mass, 0.0)
  return -jnp.sum(jnp.where(finite, jnp.exp(safe) * safe, 0.0), -1)


def semantic_entropy(seq_log_probs: jax.Array, clusters: jax.Array) -> jax.Array:
  """``SE = -sum_c p_c log p_c`` with ``p_c`` the summed sequence probabilities of
  cluster ``c``'s samples over that of all samples.

  Args:
    seq_log_probs: ``(..., N)`` ``log p(y^n|x)``.
    clusters: ``(..., N)`` int cluster ids in ``[0, N)`` (:func:`cluster_ids`).
  """
  n = seq_log_probs.shape[-1]
  member = clusters[..., None, :] == jnp.arange(n)[:, None]  # (..., C = N, N)
  log_joint = jax.nn.logsumexp(jnp.where(member, seq_log_probs[..., None, :], -jnp.inf), -1)
  log_mass = log_joint - jax.nn.logsumexp(seq_log_probs, -1, keepdims=True)
  return _entropy_of_masses(log_mass)


def discrete_semantic_entropy(clusters: jax.Array) -> jax.Array:
  """``D-SE = -sum_c (N_c / N) log (N_c / N)`` from the cluster ids ``(..., N)``."""
  n = clusters.shape[-1]
  counts = jnp.sum(clusters[..., None, :] == jnp.arange(n)[:, None], -1)
  return _entropy_of_masses(jnp.where(counts > 0, jnp.log(counts / n), -jnp.inf))


def auroc(scores: jax.Array, labels: jax.Array) -> jax.Array:
  """Area under the ROC curve of ``scores`` for ``labels`` (1 / True: positive, here an
  incorrect answer; a higher score should mean positive).

  The Mann-Whitney form with average ranks, so a tie between a positive and a negative
  counts one half (as ``sklearn.metrics.roc_auc_score``). Needs both classes; with
  concrete labels a single class raises ``ValueError``, under ``jit`` it gives NaN.
  """
  scores = jnp.asarray(scores, jnp.float32)
  if scores.ndim != 1 or jnp.shape(labels) != scores.shape:
    raise ValueError(f"scores and labels must be 1-D of one length, got {scores.shape} and "
                     f"{jnp.shape(labels)}")
  labels = jnp.asarray(labels).astype(bool)
  if not isinstance(labels, jax.core.Tracer):
    pos = int(jnp.sum(labels))
    if pos in (0, labels.shape[0]):
      raise ValueError(f"labels must hold both classes, got {pos} positives of "
                       f"{labels.shape[0]}")
  srt = jnp.sort(scores)
  below = jnp.searchsorted(srt, scores, side="left")
  upto = jnp.searchsorted(srt, scores, side="right")
  rank = (below + upto + 1) / 2  # 1-based average rank among ties
  n_pos = jnp.sum(labels)
  n_neg = labels.shape[0] - n_pos
  u = jnp.sum(jnp.where(labels, rank, 0.0)) - n_pos * (n_pos + 1) / 2
  return u / (n_pos * n_neg)
