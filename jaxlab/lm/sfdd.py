r"""SFDD: train the speculative-decoding draft model on the target's flattest samples.

A draft model ``q`` proposes tokens that the target ``p`` verifies; a proposal is accepted
with probability ``min(1, p/q)``, so the per-token acceptance rate is

.. math::
  \alpha_t = \sum_v \min(p_t(v), q_t(v)) = 1 - \mathrm{TV}(p_t, q_t).

SFDD argues that tokens where the
target's next-token distribution is *flat* carry more of the signal a draft needs, and
keeps only the flattest samples for draft training. Flatness of a distribution ``p``
over ``V`` tokens is its cosine to the uniform distribution ``U``:

.. math::
  \mathrm{flat}(p) = \cos(p, U) = \frac{1}{\sqrt{V}\,\lVert p\rVert_2}
  \in [1/\sqrt{V}, 1],

1 for the uniform distribution, ``1/sqrt(V)`` for a one-hot one. The official code scores
with ``s = 1 - cos(p, U)`` (low = flat); a sample's score is the mean of ``s`` over its
loss-masked tokens, and the filter sorts samples by ascending ``s`` and keeps the first
``round(q N)`` (:func:`keep_lowest`; the paper states it as "flatness at least the
``1 - q`` quantile", the same set up to ties).

Baselines (:func:`sample_scores` with ``kind``): ``"entropy"`` keeps the highest-entropy
samples and ``"top1"`` the lowest mean top-1 probability (both "most uncertain first",
the direction in which they compete with flatness; our reading, the code's baseline
selectors are not in the released repository), ``"random"`` a uniform random subset.

Speculative sampling (:func:`speculative_decode`, Leviathan et al. / Chen et al.): the
draft proposes ``gamma`` tokens ``x_j ~ q``; the target scores all of them in one call;
``x_j`` is accepted while ``u_j < p(x_j) / q(x_j)``; at the first rejection a token is
drawn from ``norm(max(0, p - q))``, and when all ``gamma`` are accepted a bonus token from
the target's next distribution. The output is distributed exactly as sampling from
``p``, and with a constant per-token acceptance ``alpha`` each target call yields
``(1 - alpha^(gamma + 1)) / (1 - alpha)`` tokens on average (:func:`expected_tokens_per_call`).

Example:
  >>> probs = jax.nn.softmax(target(tokens[:, :-1]))              # (N, T, V), the target's
  >>> scores = sample_scores(probs, mask, "flatness")             # (N,), low = flat
  >>> keep = keep_lowest(scores, 0.5)                             # bool (N,): flattest half
  >>> ... train the draft by forward KL to ``probs`` on the kept rows
  >>> alpha = acceptance_rate(probs_test, draft_probs_test, mask_test)
  >>> out = speculative_decode(key, target_fn, draft_fn, prompts, 64, gamma=5)

References:
  "Flatter Tokens are More Valuable for Speculative Draft Model Training",
  arXiv:2601.18902 (ICLR 2026); code fjm9933/Flatness
  (``eagle/train/main_deepspeed_index.py``: ``score_batch_tokens``, ``prune_train_loader_once``).
  Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
  arXiv:2211.17192, 2023. Chen et al., "Accelerating Large Language Model Decoding with
  Speculative Sampling", arXiv:2302.01318, 2023.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

KINDS = ("flatness", "entropy", "top1", "random")


def flatness(probs: jax.Array) -> jax.Array:
  r"""Cosine of ``probs (..., V)`` to the uniform distribution: ``1 / (sqrt(V) ||p||_2)``."""
  v = probs.shape[-1]
  return 1.0 / (jnp.sqrt(v) * jnp.linalg.norm(probs, axis=-1))


def flatness_score(probs: jax.Array) -> jax.Array:
  """The official code's token score ``s = 1 - cos(p, U)``: low = flat."""
  return 1.0 - flatness(probs)


def entropy(probs: jax.Array) -> jax.Array:
  """Shannon entropy (nats) of ``probs (..., V)``; ``0 log 0 = 0``."""
  return -jnp.sum(jnp.where(probs > 0, probs * jnp.log(jnp.where(probs > 0, probs, 1.0)), 0.0),
                  -1)


def masked_mean(values: jax.Array, mask: jax.Array | None = None) -> jax.Array:
  """Mean of ``values (N, T)`` over ``T`` weighted by ``mask (N, T)`` (all ones if None)."""
  if mask is None:
    return jnp.mean(values, -1)
  mask = jnp.asarray(mask, values.dtype)
  return jnp.sum(values * mask, -1) / jnp.maximum(jnp.sum(mask, -1), 1e-9)


def sample_scores(probs: jax.Array, mask: jax.Array | None = None, kind: str = "flatness",
                  key: jax.Array | None = None) -> jax.Array:
  """Sample-level scores ``(N,)`` from the target's distributions ``probs (N, T, V)``, low =
  kept first by :func:`keep_lowest`.

  Args:
    probs: the target's next-token distributions on each sample.
    mask: ``(N, T)`` loss mask (the tokens that count; all if None).
    kind: ``"flatness"`` (mean ``1 - cos(p, U)``), ``"entropy"`` (minus the mean entropy),
      ``"top1"`` (mean top-1 probability) or ``"random"`` (uniform noise; needs ``key``).
    key: PRNG key, for ``"random"`` only.
  """
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  if kind == "random":
    if key is None:
      raise ValueError("kind='random' needs a key")
    return jax.random.uniform(key, probs.shape[:1])
  token = {"flatness": flatness_score, "entropy": lambda p: -entropy(p),
           "top1": lambda p: jnp.max(p, -1)}[kind](probs)
  return masked_mean(token, mask)


def keep_lowest(scores: jax.Array, retain: float | jax.Array) -> jax.Array:
  """Bool ``(N,)``: the ``round(retain * N)`` samples of lowest score (the code's sort
  ascending, keep the first ``round(q N)``; ties broken by index). ``retain`` may be traced."""
  n = scores.shape[0]
  k = jnp.round(jnp.asarray(retain, jnp.float32) * n).astype(jnp.int32)
  rank = jnp.argsort(jnp.argsort(scores, stable=True), stable=True)
  return rank < k


def acceptance_rate(p: jax.Array, q: jax.Array, mask: jax.Array | None = None) -> jax.Array:
  r"""Exact acceptance rate ``mean_t sum_v min(p_t, q_t)`` of distributions ``(..., T, V)``
  (``= 1 - TV``), weighted over ``T`` by ``mask`` and averaged over the leading axes."""
  per_token = jnp.sum(jnp.minimum(p, q), -1)
  if mask is None:
    return jnp.mean(per_token)
  mask = jnp.broadcast_to(jnp.asarray(mask, per_token.dtype), per_token.shape)
  return jnp.sum(per_token * mask) / jnp.maximum(jnp.sum(mask), 1e-9)


def expected_tokens_per_call(alpha: float | jax.Array, gamma: int) -> jax.Array:
  """``(1 - alpha^(gamma+1)) / (1 - alpha)``: tokens per target call with a constant
  per-token acceptance ``alpha`` (``gamma + 1`` at ``alpha = 1``)."""
  alpha = jnp.asarray(alpha, jnp.float32)
  safe = jnp.where(alpha < 1, alpha, 0.5)
  return jnp.where(alpha < 1, (1 - safe ** (gamma + 1)) / (1 - safe), gamma + 1.0)


def subset_epochs(key: jax.Array, keep: jax.Array, batch_size: int
                  ) -> tuple[Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]],
                             jax.Array]:
  """Epoch-wise minibatches of the kept rows, for :func:`jaxlab.training.fit`.

  Every epoch is a fresh permutation (from ``fold_in(key, epoch)``) of the kept rows,
  cut into ``ceil(k / batch_size)`` batches; the last batch's slots past the kept rows
  get weight 0. ``keep`` may be traced (arms vmapped), so the step counts differ per arm:

  Returns:
    ``(sample, steps_per_epoch)``: ``sample(batch_key, step) -> (row ids (B,), weights
    (B,))`` (the batch key is unused: the order comes from ``key``) and the int32 number
    of batches per epoch.
  """
  n = keep.shape[0]
  k = jnp.sum(keep.astype(jnp.int32))
  per_epoch = jnp.maximum((k + batch_size - 1) // batch_size, 1)

  def sample(batch_key, step):
    del batch_key
    epoch, b = step // per_epoch, step % per_epoch
    noise = jax.random.uniform(jax.random.fold_in(key, epoch), (n,))
    order = jnp.argsort(jnp.where(keep, noise, 2.0))  # kept rows first, shuffled
    slot = b * batch_size + jnp.arange(batch_size)
    ids = order[jnp.minimum(slot, n - 1)]
    return ids, (slot < k).astype(jnp.float32)

  return sample, per_epoch


class SpecState(NamedTuple):
  """The loop state of :func:`speculative_decode`."""

  tokens: jax.Array  # (B, L) int32 buffer; positions >= length are scratch
  length: jax.Array  # (B,) int32 tokens fixed so far (prompt included)
  calls: jax.Array  # (B,) int32 target calls made
  accepted: jax.Array  # (B,) int32 draft tokens accepted
  key: jax.Array


class SpecResult(NamedTuple):
  """What :func:`speculative_decode` returns."""

  tokens: jax.Array  # (B, P + num_new)
  new_tokens: jax.Array  # (B,) tokens produced (>= num_new: the last call may overshoot)
  calls: jax.Array  # (B,) target calls
  accepted: jax.Array  # (B,) accepted draft tokens

  @property
  def tokens_per_call(self) -> jax.Array:
    """``sum new tokens / sum target calls`` (the paper's tau)."""
    return jnp.sum(self.new_tokens) / jnp.maximum(jnp.sum(self.calls), 1)


def _gather_rows(x: jax.Array, pos: jax.Array) -> jax.Array:
  """``x (B, L, V)`` at per-row positions ``pos (B, K)`` -> ``(B, K, V)``."""
  return jnp.take_along_axis(x, pos[:, :, None], axis=1)


def speculative_decode(key: jax.Array, target_fn: Callable[[jax.Array], jax.Array],
                       draft_fn: Callable[[jax.Array], jax.Array], prompt: jax.Array,
                       num_new: int, gamma: int = 5) -> SpecResult:
  r"""Speculative sampling of ``num_new`` tokens after ``prompt (B, P)``, fixed shapes.

  ``target_fn`` / ``draft_fn`` map a token buffer ``(B, L)`` to next-token
  distributions ``(B, L, V)`` (causal: position ``i`` sees tokens ``<= i``), e.g.
  ``lambda x: jax.nn.softmax(net(x))``; each is re-run on the whole buffer (no cache:
  small models). One cycle per row (all rows in lockstep, finished rows frozen):

  1. draft ``x_1..x_gamma``, ``x_j ~ q(. | prefix, x_{<j})``;
  2. one target call gives ``p_1..p_{gamma+1}`` at those positions;
  3. accept ``x_j`` while ``u_j < p_j(x_j) / q_j(x_j)``; with ``a`` accepted, append
     ``y ~ norm(max(0, p_{a+1} - q_{a+1}))`` (``q_{gamma+1} = 0``: the bonus token ~ ``p``).

  Args:
    key: PRNG key.
    target_fn: the target's distributions.
    draft_fn: the draft's distributions.
    prompt: int tokens ``(B, P)``, ``P >= 1``.
    num_new: tokens to produce per row (static).
    gamma: draft tokens per cycle (static).

  Returns:
    :class:`SpecResult`; ``tokens_per_call`` is the paper's tau.
  """
  if not isinstance(gamma, int) or gamma < 1:
    raise ValueError(f"gamma must be a positive int, got {gamma!r}")
  if not isinstance(num_new, int) or num_new < 1:
    raise ValueError(f"num_new must be a positive int, got {num_new!r}")
  b, p_len = prompt.shape
  total = p_len + num_new
  rows = jnp.arange(b)
  buf = jnp.zeros((b, total + gamma), jnp.int32).at[:, :p_len].set(prompt)
  zeros = jnp.zeros((b,), jnp.int32)
  init = SpecState(buf, jnp.full((b,), p_len, jnp.int32), zeros, zeros, key)

  def cycle(s: SpecState) -> SpecState:
    key, k_acc, k_res, k_draft = jax.random.split(s.key, 4)

    def propose(tokens, jk):  # step 1: the draft's proposals, one forward each
      j, k = jk
      q = _gather_rows(draft_fn(tokens), (s.length - 1 + j)[:, None])[:, 0]
      x = jax.random.categorical(k, jnp.log(q)).astype(jnp.int32)
      return tokens.at[rows, s.length + j].set(x), (q, x)

    tokens, (q, x) = jax.lax.scan(propose, s.tokens,
                                  (jnp.arange(gamma), jax.random.split(k_draft, gamma)))
    q, x = jnp.moveaxis(q, 0, 1), x.T  # (B, gamma, V), (B, gamma)
    pos = s.length[:, None] - 1 + jnp.arange(gamma + 1)
    p = _gather_rows(target_fn(tokens), pos)  # step 2: (B, gamma + 1, V)
    px = jnp.take_along_axis(p[:, :gamma], x[..., None], -1)[..., 0]
    qx = jnp.take_along_axis(q, x[..., None], -1)[..., 0]
    ok = jax.random.uniform(k_acc, (b, gamma)) * qx < px  # step 3: u < p / q
    a = jnp.sum(jnp.cumprod(ok.astype(jnp.int32), 1), 1)  # accepted before the 1st rejection
    q_pad = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], 1)
    resid = jnp.maximum(_gather_rows(p, a[:, None])[:, 0] - _gather_rows(q_pad, a[:, None])[:, 0],
                        0.0)
    p_a = _gather_rows(p, a[:, None])[:, 0]
    resid = jnp.where(jnp.sum(resid, -1, keepdims=True) > 0, resid, p_a)  # p == q: never used
    y = jax.random.categorical(k_res, jnp.log(resid)).astype(jnp.int32)
    tokens = tokens.at[rows, s.length + a].set(y)
    active = s.length < total
    return SpecState(jnp.where(active[:, None], tokens, s.tokens),
                     jnp.where(active, s.length + a + 1, s.length), s.calls + active,
                     s.accepted + jnp.where(active, a, 0), key)

  out = jax.lax.while_loop(lambda s: jnp.any(s.length < total), cycle, init)
  return SpecResult(out.tokens[:, :total], out.length - p_len, out.calls, out.accepted)
