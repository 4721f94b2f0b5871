r"""Policy-gradient fine-tuning of a sequence model over its generated tokens (GRPO / PPO).

For a generated token :math:`o_t` with probability ratio
:math:`\rho_t = \pi_\theta(o_t|\cdot) / \pi_{\mathrm{old}}(o_t|\cdot)` and advantage
:math:`A_t`, the clipped surrogate with PPO's dual clip (Ye et al. 2020) is

.. math::
  \ell_t = \max(-A_t \rho_t,\; -A_t\,\mathrm{clip}(\rho_t, 1-\epsilon, 1+\epsilon)),
  \qquad \ell_t \leftarrow \min(\ell_t,\; -c A_t) \text{ where } A_t < 0,

plus :math:`\beta` times the k3 estimate of :math:`\mathrm{KL}(\pi_\theta \| \pi_{\mathrm{ref}})`,
:math:`e^{r} - r - 1` with :math:`r = \log\pi_{\mathrm{ref}} - \log\pi_\theta` (verl's
``low_var_kl``, clipped to [-10, 10]), averaged over every generated token of the batch
("token-mean"). Advantages are pluggable:

* :func:`group_advantages`: GRPO's :math:`(r - \mathrm{mean}_g) / (\mathrm{std}_g + \varepsilon)`
  over the ``G`` samples of one prompt (sample std, ``ddof=1``, as ``torch.std``);
* :func:`returns_to_go`: discounted reward-to-go over the turns of multi-turn episodes.

Defaults are the specs' (``../shared/papers/wave3_lm_training.md``, GRPO [C]): clip 0.2,
dual clip 3, KL coefficient 0.001, one epoch. :func:`sample_groups` draws ``G``
completions per prompt with the KV cache and builds the token mask; :func:`pg_update`
takes the optimizer steps as one scanned, jittable :func:`jaxlab.training.fit` call.

Example:
  >>> groups = sample_groups(net, prompts, key, group_size=8, max_new_tokens=32, eos_id=EOS)
  >>> adv = group_advantages(reward_fn(groups.tokens).reshape(-1, 8)).reshape(-1)
  >>> batch = make_batch(logp_fn, net.params, ref_params, groups, adv)
  >>> params, opt_state, metrics = pg_update(logp_fn, opt, net.params, opt_state, batch,
  ...                                        minibatch_size=64, key=key)

References:
  Shao et al., "DeepSeekMath" (GRPO), arXiv:2402.03300, 2024.
  Schulman et al., "Proximal Policy Optimization Algorithms", arXiv:1707.06347, 2017.
  Ye et al., "Mastering Complex Control in MOBA Games with Deep RL" (dual clip), 2020.
  Schulman, "Approximating KL divergence" (k3), 2020, http://joschu.net/blog/kl-approx.html.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlab.models import decoding
from jaxlab.nn import Net
from jaxlab.training import fit

KL_CLIP = 10.0  # verl's clamp of the k3 estimate


def group_advantages(rewards: jax.Array, eps: float = 1e-6) -> jax.Array:
  """GRPO advantages over the last axis (one group of samples of the same prompt):
  ``(r - mean) / (std + eps)`` with the sample std (``ddof=1``)."""
  rewards = jnp.asarray(rewards, jnp.float32)
  if rewards.ndim < 1 or rewards.shape[-1] < 2:
    raise ValueError(f"rewards must have a group axis of at least 2 samples last, got shape "
                     f"{rewards.shape}")
  mean = rewards.mean(-1, keepdims=True)
  return (rewards - mean) / (rewards.std(-1, ddof=1, keepdims=True) + eps)


def returns_to_go(rewards: jax.Array, gamma: float = 1.0) -> jax.Array:
  """``G_k = sum_{j >= k} gamma^(j-k) r_j`` over the last (turn) axis."""
  rewards = jnp.asarray(rewards, jnp.float32)

  def back(acc, r):
    acc = r + gamma * acc
    return acc, acc

  moved = jnp.moveaxis(rewards, -1, 0)
  _, g = jax.lax.scan(back, jnp.zeros_like(moved[0]), moved, reverse=True)
  return jnp.moveaxis(g, 0, -1)


def k3_kl(log_probs: jax.Array, ref_log_probs: jax.Array) -> jax.Array:
  """Per-token k3 estimate of ``KL(pi || pi_ref)`` at tokens sampled from ``pi``:
  ``exp(r) - r - 1``, ``r = ref - logp``, clipped to ``[-10, 10]`` (verl's low_var_kl)."""
  r = ref_log_probs - log_probs
  return jnp.clip(jnp.exp(r) - r - 1.0, -KL_CLIP, KL_CLIP)


def clipped_pg_loss(log_probs: jax.Array, old_log_probs: jax.Array, advantages: jax.Array,
                    mask: jax.Array, ref_log_probs: jax.Array | None = None, *,
                    clip_eps: float = 0.2, dual_clip: float | None = 3.0,
                    kl_coef: float = 1e-3) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The token-mean clipped surrogate (+ k3 KL) over ``mask``-ed tokens.

  Args:
    log_probs: ``log pi_theta`` of each token, ``(..., T)`` (differentiated).
    old_log_probs: ``log pi_old`` at sampling time (constants).
    advantages: per-token advantages, broadcastable to ``log_probs``.
    mask: 1 for generated tokens that are trained, 0 for prompt and padding.
    ref_log_probs: ``log pi_ref`` of a frozen reference (None, or ``kl_coef=0``: no KL).
    clip_eps: PPO's epsilon.
    dual_clip: PPO's dual-clip constant ``c > 1`` for negative advantages (None: off).
    kl_coef: beta, the KL weight.

  Returns:
    ``(loss, metrics)``; metrics hold the token means of the surrogate, the KL, the
    clipped fraction and the ratio.
  """
  mask = jnp.asarray(mask, jnp.float32)
  adv = jnp.broadcast_to(jax.lax.stop_gradient(advantages), log_probs.shape)
  ratio = jnp.exp(log_probs - jax.lax.stop_gradient(old_log_probs))
  unclipped, clipped = -adv * ratio, -adv * jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
  pg = jnp.maximum(unclipped, clipped)
  if dual_clip is not None:
    pg = jnp.where(adv < 0, jnp.minimum(pg, -adv * dual_clip), pg)
  count = jnp.maximum(mask.sum(), 1.0)
  mean = lambda x: jnp.sum(x * mask) / count
  kl = jnp.zeros_like(pg) if ref_log_probs is None else k3_kl(log_probs, ref_log_probs)
  loss = mean(pg) + kl_coef * mean(kl)
  return loss, {"pg_loss": mean(pg), "kl": mean(kl), "ratio": mean(ratio),
                "clip_frac": mean((clipped > unclipped).astype(jnp.float32))}


def token_log_probs(apply: Callable[[Any, jax.Array], jax.Array], params: Any,
                    tokens: jax.Array) -> jax.Array:
  """``log p(tokens[:, t+1] | tokens[:, :t+1])`` for every position, ``(N, T - 1)``, with
  ``apply(params, tokens) -> logits`` (e.g. ``lambda p, x: net(x, params=p)``)."""
  logp = jax.nn.log_softmax(apply(params, tokens[:, :-1]).astype(jnp.float32))
  return jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]


class Groups(NamedTuple):
  """``G`` sampled completions of each of ``P`` prompts, rows grouped by prompt.

  ``tokens (P * G, T_p + N)`` are prompt + completion; ``mask (P * G, T_p + N - 1)``
  marks the next-token positions that predict a generated token up to and including
  EOS; ``lengths (P * G,)`` are the completion lengths.
  """

  tokens: jax.Array
  mask: jax.Array
  lengths: jax.Array


def sample_groups(net: Net, prompts: jax.Array, key: jax.Array, group_size: int,
                  max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                  eos_id: int | None = None, pad_id: int = 0, forced: jax.Array | None = None,
                  forced_len: jax.Array | None = None) -> Groups:
  """Samples ``group_size`` completions per prompt with the KV cache
  (:func:`jaxlab.models.decoding.generate`). ``forced (P, N)`` / ``forced_len (P,)``
  teacher-force the first tokens of each prompt's completions (AdaBack's revealed prefix):
  they are part of ``tokens`` but not of ``mask`` (nothing is learned from them)."""
  if not isinstance(group_size, int) or group_size < 1:
    raise ValueError(f"group_size must be a positive int, got {group_size!r}")
  rep = jnp.repeat(prompts, group_size, axis=0)
  if forced is not None:
    forced = jnp.repeat(forced, group_size, axis=0)
    forced_len = jnp.repeat(jnp.asarray(forced_len, jnp.int32), group_size, axis=0)
  gen = decoding.generate(net, rep, key, max_new_tokens, temperature=temperature, top_k=top_k,
                          eos_id=eos_id, pad_id=pad_id, forced=forced, forced_len=forced_len)
  tokens = jnp.concatenate([rep, gen.tokens.astype(rep.dtype)], 1)
  t_p = prompts.shape[1]
  first = t_p - 1 + (0 if forced is None else forced_len[:, None])
  pos = jnp.arange(tokens.shape[1] - 1)  # position t predicts token t + 1
  mask = (pos >= first) & (pos < t_p - 1 + gen.lengths[:, None])
  return Groups(tokens, mask.astype(jnp.float32), gen.lengths)


class PGBatch(NamedTuple):
  """Everything :func:`pg_update` trains on, one row per sequence."""

  tokens: jax.Array  # (N, T)
  mask: jax.Array  # (N, T - 1)
  advantages: jax.Array  # (N, T - 1) or (N, 1): per token or per sequence
  old_log_probs: jax.Array  # (N, T - 1)
  ref_log_probs: jax.Array  # (N, T - 1)


def make_batch(logp_fn: Callable[[Any, jax.Array], jax.Array], params: Any, ref_params: Any,
               groups: Groups, advantages: jax.Array) -> PGBatch:
  """Recomputes the old and reference log-probs (``logp_fn(params, tokens) -> (N, T-1)``,
  e.g. ``functools.partial(token_log_probs, apply)``) and attaches the advantages
  (``(N,)`` per sequence or ``(N, T - 1)`` per token)."""
  adv = jnp.asarray(advantages, jnp.float32)
  adv = adv[:, None] if adv.ndim == 1 else adv
  return PGBatch(groups.tokens, groups.mask, adv,
                 jax.lax.stop_gradient(logp_fn(params, groups.tokens)),
                 jax.lax.stop_gradient(logp_fn(ref_params, groups.tokens)))


def pg_update(logp_fn: Callable[[Any, jax.Array], jax.Array],
              optimizer: optax.GradientTransformation, params: Any, opt_state: Any,
              batch: PGBatch, *, minibatch_size: int, key: jax.Array, epochs: int = 1,
              clip_eps: float = 0.2, dual_clip: float | None = 3.0, kl_coef: float = 1e-3):
  """``epochs`` passes over ``batch`` in shuffled minibatches, one optimizer step each,
  as one scanned :func:`jaxlab.training.fit` (jit it; one compile per shape).

  Returns ``(params, opt_state, metrics)`` with per-step loss and
  :func:`clipped_pg_loss`'s metrics stacked over the steps.
  """
  n = batch.tokens.shape[0]
  if not isinstance(minibatch_size, int) or minibatch_size < 1 or n % minibatch_size:
    raise ValueError(f"minibatch_size must be a positive int dividing the {n} sequences, got "
                     f"{minibatch_size!r}")
  if not isinstance(epochs, int) or epochs < 1:
    raise ValueError(f"epochs must be a positive int, got {epochs!r}")
  per_epoch = n // minibatch_size
  perms = jnp.stack([jax.random.permutation(k, n) for k in jax.random.split(key, epochs)])
  idx = perms.reshape(epochs * per_epoch, minibatch_size)
  adv = jnp.broadcast_to(batch.advantages, batch.mask.shape)
  batches = jax.tree.map(lambda x: x[idx], batch._replace(advantages=adv))

  def loss_fn(p, b: PGBatch, _):
    return clipped_pg_loss(logp_fn(p, b.tokens), b.old_log_probs, b.advantages, b.mask,
                           b.ref_log_probs, clip_eps=clip_eps, dual_clip=dual_clip,
                           kl_coef=kl_coef)

  result = fit(loss_fn, optimizer, params, batches=batches, has_aux=True, opt_state=opt_state)
  metrics = {"loss": result.losses, **result.metrics.aux}
  return result.state.params, result.state.opt_state, metrics
