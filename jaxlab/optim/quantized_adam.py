r"""Adam under floating-point quantization, as an optax transform.

The quantized Adam step of Tang, Li, Zou (2025), Alg. 1, with the master/worker
model: the gradient arrives quantized, the master updates the moments from it
and stores them quantized, then stores the new weights quantized:

.. math::
  \hat g_t &= Q_G(g_t) \\
  m_t &= Q_M\big(\beta_1 m_{t-1} + (1 - \beta_1) \hat g_t\big) \\
  v_t &= Q_V\big(\beta_2 v_{t-1} + (1 - \beta_2) \hat g_t^2\big) \\
  u_t &= -\eta_t \Big(\frac{m_t / (1 - \beta_1^t)}
          {\sqrt{v_t / (1 - \beta_2^t)} + \epsilon} + \lambda w_{t-1}\Big) \\
  w_t &= Q_W(w_{t-1} + u_t)

With every ``Q`` the identity the arithmetic is written exactly as optax's
``scale_by_adam`` writes it, so the updates are bit-identical to ``optax.adam``
(``optax.adamw`` with weight decay).

References:
  Tang, Li, Zou, "A Convergence Analysis of Adaptive Optimizers under
  Floating-point Quantization", arXiv:2510.21314, ICLR 2026.
  Kingma, Ba, "Adam: A Method for Stochastic Optimization", arXiv:1412.6980.
  Dettmers et al., "8-bit Optimizers via Block-wise Quantization",
  arXiv:2110.02861 (the block-wise compact moment storage).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.checks import check_int
from jaxlab.core.rng import split_leaf_keys, stream_key_data
from jaxlab.optim import moment_storage as ms
from jaxlab.optim.transforms import (
  STREAM_MU,
  STREAM_NU,
  add_decayed_weights,
  check_format,
  quantize_updates,
  quantize_weights,
)
from jaxlab.quant.float_format import FloatFormat, check_rounding, quantize


class ScaleByQuantizedAdamState(NamedTuple):
  """State of :func:`scale_by_quantized_adam`.

  ``mu`` and ``nu`` have the params' tree structure, one leaf per parameter:
  float arrays (exact or format-quantized) or, with ``moment_storage``, codes.
  ``mu_scale`` / ``nu_scale`` hold the per-block scales of the codes (None
  without block scaling).
  """

  count: jax.Array  # int32 step counter
  key: jax.Array  # raw uint32 key data for stochastic rounding
  mu: Any
  nu: Any
  mu_scale: Any
  nu_scale: Any


@dataclasses.dataclass(frozen=True)
class MomentBuffer:
  """Keeps one moment tree between steps: exact, format-quantized or encoded.

  Static configuration shared by the quantized Adam and Muon rules; all arrays
  live in the optimizer state.
  """

  fmt: FloatFormat | None
  storage: str | None
  rounding: str
  second_moment: bool

  def init(self, params: Any) -> tuple[Any, Any]:
    return ms.init_codes(params, self.storage)

  def load(self, codes: Any, scales: Any, like: Any) -> Any:
    """Decoded moments in the dtype of ``like`` (the incoming updates)."""
    if self.storage is None:
      return codes
    if scales is None:
      scales = jax.tree.map(lambda _: None, codes)
    return jax.tree.map(
        lambda c, s, g: ms.decode(c, s, self.storage, self.second_moment, g.dtype),
        codes, scales, like, is_leaf=lambda x: x is None)

  def store(self, values: Any, keys: list, old_codes: Any) -> tuple[Any, Any, Any]:
    """Returns ``(codes, scales, stored_values)``: what is kept and what it means."""
    leaves, treedef = jax.tree.flatten(values)
    old = treedef.flatten_up_to(old_codes)
    if self.storage is None:
      if self.fmt is None:
        q = leaves
      else:
        q = [quantize(x, self.fmt, rounding=self.rounding, key=k)
             for x, k in zip(leaves, keys, strict=True)]
      q = [x.astype(o.dtype) for x, o in zip(q, old, strict=True)]
      tree = jax.tree.unflatten(treedef, q)
      return tree, None, tree
    # Compact storage always rounds stochastically (see moment_storage).
    enc = [ms.encode(x, self.storage, "stochastic", k, self.second_moment)
           for x, k in zip(leaves, keys, strict=True)]
    codes = jax.tree.unflatten(treedef, [c for c, _ in enc])
    scales = None if self.storage == "bfloat16" else jax.tree.unflatten(
        treedef, [s for _, s in enc])
    return codes, scales, self.load(codes, scales, values)


def corrected_momentum(mu: Any, updates: Any, decay: Any, count_inc: jax.Array,
                       nesterov: bool) -> Any:
  """Bias-corrected momentum, or Dozat's Nesterov form, exactly as optax forms it.

  ``m / (1 - b^t)``, or ``b * m / (1 - b^(t+1)) + (1 - b) * g / (1 - b^t)``.
  """
  if not nesterov:
    return optax.tree.bias_correction(mu, decay, count_inc)
  return jax.tree.map(
      lambda m, g: decay * m + (1 - decay) * g,
      optax.tree.bias_correction(mu, decay, optax.safe_increment(count_inc)),
      optax.tree.bias_correction(updates, decay, count_inc),
  )


def scale_by_quantized_adam(
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    eps_root: jax.typing.ArrayLike = 0.0,
    *,
    nesterov: bool = False,
    mu: FloatFormat | None = None,
    nu: FloatFormat | None = None,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
) -> optax.GradientTransformation:
  r"""Rescales updates by Adam with quantized (or compactly stored) moments.

  ``m_t = Q_M(b1 m + (1 - b1) g)``, ``v_t = Q_V(b2 v + (1 - b2) g^2)``,
  ``u = m_hat / (sqrt(v_hat + eps_root) + eps)``; with ``nesterov`` the
  numerator is Dozat's ``b1 m_hat' + (1 - b1) g_hat`` as in ``optax``.

  Args:
    b1, b2, eps, eps_root: as in ``optax.scale_by_adam``.
    nesterov: Nesterov (NAdam) momentum.
    mu, nu: formats of the stored first / second moments (None = exact).
    rounding: "nearest", "stochastic" or "truncate", for every quantizer.
    seed: seed of the stochastic rounding streams.
    moment_storage: None, "bfloat16" (a plain cast, no scales), "float8_e4m3fn"
      or "int8" (block-wise absmax scaled, block 256, second moment stored as
      sqrt(v)); always rounded stochastically; exclusive with ``mu`` / ``nu``.

  Returns:
    An ``optax.GradientTransformation`` with :class:`ScaleByQuantizedAdamState`.
  """
  check_format(mu, "mu")
  check_format(nu, "nu")
  check_rounding(rounding, need_key=False)
  check_int(seed, "seed")  # fails here, not deep in jax.random.key's trace
  ms.check_storage(moment_storage, mu, nu)
  mu_buf = MomentBuffer(mu, moment_storage, rounding, second_moment=False)
  nu_buf = MomentBuffer(nu, moment_storage, rounding, second_moment=True)

  def init_fn(params):
    mu0, mu_scale = mu_buf.init(params)
    nu0, nu_scale = nu_buf.init(params)
    key = stream_key_data(seed, STREAM_MU)
    return ScaleByQuantizedAdamState(jnp.zeros([], jnp.int32), key, mu0, nu0, mu_scale, nu_scale)

  def update_fn(updates, state, params=None):
    del params
    n = len(jax.tree.leaves(updates))
    needs_key = rounding == "stochastic" or moment_storage is not None
    key, leaf_keys = split_leaf_keys(state.key, n, needs_key)
    mu_keys = [k if k is None else jax.random.fold_in(k, STREAM_MU) for k in leaf_keys]
    nu_keys = [k if k is None else jax.random.fold_in(k, STREAM_NU) for k in leaf_keys]
    mu_prev = mu_buf.load(state.mu, state.mu_scale, updates)
    nu_prev = nu_buf.load(state.nu, state.nu_scale, updates)
    # Moment updates, written as optax.tree.update_moment(_per_elem_norm) does.
    mu_new = jax.tree.map(lambda g, t: (1 - b1) * (g**1) + b1 * t, updates, mu_prev)
    nu_new = jax.tree.map(lambda g, t: (1 - b2) * (g**2) + b2 * t, updates, nu_prev)
    mu_codes, mu_scale, mu_t = mu_buf.store(mu_new, mu_keys, state.mu)
    nu_codes, nu_scale, nu_t = nu_buf.store(nu_new, nu_keys, state.nu)

    count_inc = optax.safe_increment(state.count)
    mu_hat = corrected_momentum(mu_t, updates, b1, count_inc, nesterov)
    nu_hat = optax.tree.bias_correction(nu_t, b2, count_inc)
    new_updates = jax.tree.map(
        lambda m, v, g: (m / (jnp.sqrt(v + eps_root) + eps)).astype(g.dtype),
        mu_hat, nu_hat, updates)
    new_state = ScaleByQuantizedAdamState(count_inc, key, mu_codes, nu_codes, mu_scale, nu_scale)
    return new_updates, new_state

  return optax.GradientTransformation(init_fn, update_fn)


def quantized_adam(
    learning_rate: optax.ScalarOrSchedule,
    b1: jax.typing.ArrayLike = 0.9,
    b2: jax.typing.ArrayLike = 0.999,
    eps: jax.typing.ArrayLike = 1e-8,
    *,
    nesterov: bool = False,
    weight_decay: jax.typing.ArrayLike = 0.0,
    grads: FloatFormat | None = None,
    weights: FloatFormat | None = None,
    mu: FloatFormat | None = None,
    nu: FloatFormat | None = None,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
) -> optax.GradientTransformationExtraArgs:
  r"""Adam (AdamW) with simulated low-precision G, W, M, V or compact moments.

  ``chain(Q_G, scale_by_quantized_adam(Q_M, Q_V), add_decayed_weights,
  scale_by_learning_rate, Q_W)``. With all formats None and no
  ``moment_storage`` the updates equal ``optax.adam`` bit for bit
  (``optax.adamw`` when ``weight_decay`` is given and not a literal 0; a
  traced ``weight_decay`` from ``optax.inject_hyperparams`` always applies the
  decay term, never a Python branch on its value).

  Args:
    learning_rate: scalar or schedule.
    b1, b2, eps: Adam's decay rates and epsilon.
    nesterov: NAdam-style momentum as in ``optax.adam(nesterov=True)``.
    weight_decay: decoupled weight decay (AdamW), multiplied by the lr.
    grads, weights, mu, nu: :class:`~jaxlab.quant.FloatFormat` of each
      quantized quantity, or None for exact.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic rounding streams (kept in the state).
    moment_storage: None, "bfloat16", "float8_e4m3fn" or "int8".

  Returns:
    An ``optax.GradientTransformationExtraArgs``.

  Example:
    >>> opt = quantized_adam(1e-3, weights=FloatFormat.BF16, nu=FloatFormat(8, 7),
    ...                      rounding="stochastic")
    >>> state = opt.init(params)
    >>> updates, state = opt.update(grads, state, params)
    >>> params = optax.apply_updates(params, updates)

  References:
    Tang, Li, Zou, arXiv:2510.21314 (ICLR 2026), Alg. 1.
  """
  check_format(grads, "grads")
  check_format(weights, "weights")
  rule = scale_by_quantized_adam(
      b1, b2, eps, nesterov=nesterov, mu=mu, nu=nu, rounding=rounding, seed=seed,
      moment_storage=moment_storage)
  return optax.chain(
      quantize_updates(grads, rounding=rounding, seed=seed),
      rule,
      # Always in the chain (one state structure; weight_decay may be a tracer
      # under inject_hyperparams), a no-op for a literal 0. A traced 0 adds +-0
      # to an update that is never -0, so it stays bit-identical to adam.
      add_decayed_weights(weight_decay),
      optax.scale_by_learning_rate(learning_rate),
      quantize_weights(weights, rounding=rounding, seed=seed),
  )
