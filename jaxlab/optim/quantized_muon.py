r"""Muon under floating-point quantization, as an optax transform.

Muon orthogonalizes the (Nesterov) momentum of each matrix parameter with a
quintic Newton-Schulz iteration; other parameters go to Adam. Following
Tang, Li, Zou (2025) the momentum is stored quantized and the auxiliary Adam
is the quantized Adam of :mod:`jaxlab.optim.quantized_adam`; the
Newton-Schulz output itself is not quantized (the paper analyses an exact
polar factor):

.. math::
  \hat g_t &= Q_G(g_t), \quad
  m_t = Q_M\big(\beta m_{t-1} + (1 - \beta) \hat g_t\big) \\
  O_t &= \mathrm{NS}_5\big(\beta \tilde m_t + (1 - \beta) \tilde g_t\big)
     \quad\text{(Nesterov, bias-corrected as optax)} \\
  w_t &= Q_W\big(w_{t-1} - \eta_t (s(W) O_t + \lambda w_{t-1})\big),
  \quad s(W) = \sqrt{\max(1, \mathrm{fan\_out} / \mathrm{fan\_in})}

Routing, coefficients (3.4445, -4.7750, 2.0315), Frobenius preconditioning,
shape scaling, ``eps`` and the Nesterov AdamW for non-matrix parameters are
those of ``optax.contrib.muon`` (optax 0.2.8); with no quantization the
updates are bit-identical to it.

References:
  Tang, Li, Zou, arXiv:2510.21314 (ICLR 2026).
  Jordan et al., "Muon: An optimizer for hidden layers in neural networks", 2024.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

# The Newton-Schulz iteration and shape scaling are optax's own, so that the
# unquantized path is the anchor itself (they live in optax's contrib module).
from optax.contrib._muon import (
    _DEFAULT_NS_COEFFS,
    MuonDimensionNumbers,
    orthogonalize_via_newton_schulz,
    scale_by_shape,
)

from jaxlab.core.checks import check_int
from jaxlab.core.rng import advance_key, stream_key_data
from jaxlab.optim import moment_storage as ms
from jaxlab.optim.quantized_adam import (
    MomentBuffer,
    check_implementation,
    corrected_momentum,
    fused_adam_update,
    moment_keys,
    scale_by_quantized_adam,
    with_implementation,
)
from jaxlab.optim.transforms import (
    STREAM_MU,
    add_decayed_weights,
    check_format,
    quantize_updates,
    quantize_weights,
)
from jaxlab.quant.float_format import FloatFormat, check_rounding


class ScaleByQuantizedMuonState(NamedTuple):
  """State of :func:`scale_by_quantized_muon` (``mu`` as in the Adam state)."""

  count: jax.Array
  key: jax.Array
  mu: Any
  mu_scale: Any
  ns_coeffs: jax.Array


def _muon_dim_nums(tree: Any) -> Any:
  # Called on the muon partition (non-matrix leaves are already MaskedNodes).
  return jax.tree.map(lambda _: MuonDimensionNumbers(), tree)


def scale_by_quantized_muon(
    ns_coeffs: tuple = _DEFAULT_NS_COEFFS,
    ns_steps: int = 5,
    beta: jax.typing.ArrayLike = 0.95,
    eps: jax.typing.ArrayLike = 1e-8,
    *,
    nesterov: bool = True,
    mu: FloatFormat | None = None,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
) -> optax.GradientTransformation:
  """Muon's rule for 2-D parameters with a quantized (or compact) momentum.

  ``m_t = Q_M(beta m + (1 - beta) g)``; the update is the Newton-Schulz
  orthogonalization of the (Nesterov, bias-corrected) momentum, as in
  ``optax.contrib.scale_by_muon`` with Frobenius preconditioning.

  Args:
    ns_coeffs: quintic Newton-Schulz coefficients (a, b, c).
    ns_steps: number of Newton-Schulz iterations.
    beta: momentum decay.
    eps: added to the Frobenius norm before normalizing.
    nesterov: Nesterov momentum (optax's default for Muon).
    mu: format of the stored momentum, or None.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic rounding stream.
    moment_storage: None, "bfloat16", "float8_e4m3fn" or "int8"; exclusive
      with ``mu``.

  Returns:
    An ``optax.GradientTransformation``.
  """
  check_format(mu, "mu")
  check_rounding(rounding, need_key=False)
  check_int(seed, "seed")  # fails here, not deep in jax.random.key's trace
  ms.check_storage(moment_storage, mu)
  buf = MomentBuffer(mu, moment_storage, rounding, second_moment=False)

  def init_fn(params):
    mu0, mu_scale = buf.init(params)
    key = stream_key_data(seed, STREAM_MU + 16)
    return ScaleByQuantizedMuonState(
        jnp.zeros([], jnp.int32), key, mu0, mu_scale, jnp.asarray(ns_coeffs))

  def update_fn(updates, state, params=None):
    del params
    needs_key = rounding == "stochastic" or moment_storage is not None
    key, step_key = advance_key(state.key, needs_key)
    mu_prev = buf.load(state.mu, state.mu_scale, updates)
    mu_new = jax.tree.map(lambda g, t: (1 - beta) * (g**1) + beta * t, updates, mu_prev)
    (mu_key,) = moment_keys(step_key, (None,), moment_storage, len(jax.tree.leaves(mu_new)))
    mu_codes, mu_scale, mu_t = buf.store(mu_new, mu_key, state.mu)
    count_inc = optax.safe_increment(state.count)
    mu_hat = corrected_momentum(mu_t, updates, beta, count_inc, nesterov)
    new_updates = jax.tree.map(
        lambda x: orthogonalize_via_newton_schulz(
            x, state.ns_coeffs, ns_steps, "frobenius", eps, MuonDimensionNumbers()),
        mu_hat)
    return new_updates, ScaleByQuantizedMuonState(
        count_inc, key, mu_codes, mu_scale, state.ns_coeffs)

  return optax.GradientTransformation(init_fn, update_fn)


def quantized_muon(
    learning_rate: optax.ScalarOrSchedule,
    *,
    beta: jax.typing.ArrayLike = 0.95,
    nesterov: bool = True,
    ns_steps: int = 5,
    grads: FloatFormat | None = None,
    weights: FloatFormat | None = None,
    mu: FloatFormat | None = None,
    nu: FloatFormat | None = None,
    adam_b1: jax.typing.ArrayLike = 0.9,
    adam_b2: jax.typing.ArrayLike = 0.999,
    rounding: str = "nearest",
    seed: jax.typing.ArrayLike = 0,
    moment_storage: str | None = None,
    ns_coeffs: tuple = _DEFAULT_NS_COEFFS,
    eps: jax.typing.ArrayLike = 1e-8,
    weight_decay: jax.typing.ArrayLike = 0.0,
    adam_weight_decay: jax.typing.ArrayLike = 0.0,
    adam_learning_rate: optax.ScalarOrSchedule | None = None,
    implementation: str = "auto",
) -> optax.GradientTransformationExtraArgs:
  """Muon for 2-D parameters, quantized AdamW for the rest, under quantization.

  ``chain(Q_G, partition({muon: chain(rule(Q_M), scale_by_shape,
  add_decayed_weights, lr), adam: chain(quantized Adam(Q_M, Q_V),
  add_decayed_weights, lr)}), Q_W)``, mirroring ``optax.contrib.muon``: with
  no quantization the updates equal ``optax.contrib.muon`` at the same
  arguments bit for bit.

  Args:
    learning_rate: scalar or schedule (also Adam's unless
      ``adam_learning_rate`` is given).
    beta: Muon momentum decay.
    nesterov: Nesterov momentum, for Muon and its Adam (as optax).
    ns_steps: Newton-Schulz iterations.
    grads, weights: formats of gradients and stored weights (all params).
    mu: format of Muon's momentum and of Adam's first moment.
    nu: format of Adam's second moment.
    adam_b1, adam_b2: Adam's decay rates for non-matrix parameters.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic rounding streams.
    moment_storage: None, "bfloat16", "float8_e4m3fn" or "int8" for every
      moment buffer; exclusive with ``mu`` / ``nu``.
    ns_coeffs: Newton-Schulz coefficients.
    eps: Frobenius-norm epsilon and Adam's epsilon (as optax).
    weight_decay: Muon's decoupled weight decay.
    adam_weight_decay: Adam's decoupled weight decay.
    adam_learning_rate: Adam's learning rate (default: ``learning_rate``).
    implementation: "auto" (default), "pallas" or "xla", for the Adam part
      only, as in :func:`~jaxlab.optim.quantized_adam`: the non-matrix
      parameters' moments and updates in one fused kernel over their flattened
      leaves (Q_G and Q_W stay per-leaf ``jnp`` transforms over all params,
      Muon's rule is always ``jnp``). The kernel has no Nesterov momentum, so
      with ``nesterov=True`` (the default, as optax) or ``moment_storage`` the
      Adam part runs the ``jnp`` chain under every ``implementation``.

  Returns:
    An ``optax.GradientTransformationExtraArgs``.
  """
  check_format(grads, "grads")
  check_format(weights, "weights")
  check_format(nu, "nu")
  ms.check_storage(moment_storage, mu, nu)
  check_implementation(implementation)
  if adam_learning_rate is None:
    adam_learning_rate = learning_rate
  labels = lambda params: jax.tree.map(lambda x: "muon" if x.ndim == 2 else "adam", params)
  muon_part = optax.chain(
      scale_by_quantized_muon(
          ns_coeffs, ns_steps, beta, eps, nesterov=nesterov, mu=mu, rounding=rounding,
          seed=seed, moment_storage=moment_storage),
      scale_by_shape(weight_dimension_numbers=_muon_dim_nums),
      add_decayed_weights(weight_decay),
      optax.scale_by_learning_rate(learning_rate),
  )
  adam_part = optax.chain(
      scale_by_quantized_adam(
          adam_b1, adam_b2, eps, nesterov=nesterov, mu=mu, nu=nu, rounding=rounding,
          seed=seed, moment_storage=moment_storage),
      add_decayed_weights(adam_weight_decay),
      optax.scale_by_learning_rate(adam_learning_rate),
  )
  fused = None
  if not nesterov and moment_storage is None:
    fused = functools.partial(
        fused_adam_update, learning_rate=adam_learning_rate, b1=adam_b1, b2=adam_b2, eps=eps,
        weight_decay=adam_weight_decay, grads=None, weights=None, mu=mu, nu=nu,
        rounding=rounding, outer=False)
  adam_part = with_implementation(adam_part, fused, implementation)
  return optax.chain(
      quantize_updates(grads, rounding=rounding, seed=seed),
      optax.partition({"muon": muon_part, "adam": adam_part}, labels),
      quantize_weights(weights, rounding=rounding, seed=seed),
  )
