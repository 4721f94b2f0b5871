r"""Flow-matching policies: training loss, Euler sampling and log-densities.

A flow policy transports noise ``z ~ N(0, I)`` to an action by integrating a
velocity field ``v(s, x, t)`` from ``t = 0`` to ``t = 1``. With the linear
(rectified-flow) path :math:`x_t = (1 - t) z + t a` the field is learned by
regressing :math:`v(s, x_t, t)` on :math:`a - z`. Its density follows from the
instantaneous change of variables,

.. math::
  \log p_1(a \mid s) = \log \mathcal N(x_0; 0, I)
      - \int_0^1 \nabla_x \cdot v(s, x_t, t)\, dt,

integrated backwards from :math:`x_1 = a` with ``num_steps`` Euler steps.

``velocity_fn(obs, x, t)`` is always called on a batch: ``obs (B, obs_dim)``,
``x (B, action_dim)``, ``t (B, 1)``, and returns a velocity of ``x``'s shape.
Samples must not interact inside ``velocity_fn`` (no batch statistics): the
divergences below differentiate the batched call.

References:
  Lipman et al., "Flow Matching for Generative Modeling", arXiv:2210.02747, 2022.
  Liu et al., "Flow Straight and Fast", arXiv:2209.03003, 2022.
  Chen et al., "Neural Ordinary Differential Equations", arXiv:1806.07366, 2018.
  Hutchinson, "A stochastic estimator of the trace of the influence matrix",
  1989. Chae et al., "Flow Actor-Critic for Offline Reinforcement Learning",
  arXiv:2602.18015, 2026 (Sec. 4: the behavior-proxy density).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_int

VelocityFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
# hook(carry, k, x, t, evaluate) -> (velocity, carry): see euler_sample
VelocityHook = Callable[[Any, jax.Array, jax.Array, jax.Array, Callable[[], jax.Array]],
                        tuple[jax.Array, Any]]
# "hutchinson": Rademacher probes; "hutchinson_gaussian": standard normal probes (the official
# FAC code offers both, as logp_method "hutch-rade" / "hutch-gaus"; its default is exact)
DIVERGENCES = ("exact", "hutchinson", "hutchinson_gaussian")
PROBES = ("rademacher", "gaussian")


def flow_matching_loss(
    velocity_fn: VelocityFn, obs: jax.Array, actions: jax.Array, key: jax.Array,
    weights: jax.Array | None = None,
) -> jax.Array:
  r"""Mean squared error of the conditional flow-matching regression.

  :math:`\mathbb E_{t \sim U[0,1], z \sim N(0,I)}
  \|v(s, (1-t) z + t a, t) - (a - z)\|^2`, averaged over the batch and
  the action dimensions (as FQL does). With ``weights`` :math:`w_i` the batch
  mean becomes :math:`\sum_i w_i \ell_i / \sum_i w_i` of the per-example
  losses :math:`\ell_i` (mean over action dimensions): a row of weight 0 (the
  padding of a last, partial batch of an epoch) does not contribute, and
  all-zero weights give 0.

  Args:
    velocity_fn: the field ``v(obs, x, t)``.
    obs: ``(B, obs_dim)`` observations.
    actions: ``(B, action_dim)`` dataset actions (the flow's targets).
    key: PRNG key for ``t`` and ``z``.
    weights: optional ``(B,)`` non-negative per-example weights; ``None`` is
      the plain mean (unchanged, bit for bit).

  Returns:
    The scalar loss.
  """
  if weights is not None and jnp.shape(weights) != actions.shape[:1]:
    raise ValueError(f"weights must have shape {actions.shape[:1]} (one per example), got "
                     f"{jnp.shape(weights)}")
  key_t, key_z = jax.random.split(key)
  t = jax.random.uniform(key_t, (actions.shape[0], 1), actions.dtype)
  z = jax.random.normal(key_z, actions.shape, actions.dtype)
  x_t = (1.0 - t) * z + t * actions
  sq = (velocity_fn(obs, x_t, t) - (actions - z)) ** 2
  if weights is None:
    return jnp.mean(sq)
  weights = jnp.asarray(weights, sq.dtype)
  total = jnp.sum(weights)
  return jnp.sum(weights * jnp.mean(sq, axis=-1)) / jnp.where(total > 0, total, 1.0)


def euler_sample(
    velocity_fn: VelocityFn, obs: jax.Array, noise: jax.Array, num_steps: int = 10, *,
    hook: VelocityHook | None = None, hook_carry: Any = None,
) -> jax.Array | tuple[jax.Array, Any]:
  """Integrates the flow from ``noise`` at ``t = 0`` to ``t = 1`` (forward Euler).

  ``x_{k+1} = x_k + v(s, x_k, k / N) / N``. No clipping: callers clip to the
  action box where they need to.

  With a ``hook`` the step's velocity is the hook's choice: ``hook(carry, k, x, t,
  evaluate) -> (v, carry)``, where ``evaluate()`` returns ``velocity_fn(obs, x, t)``
  (the hook may call it under ``lax.cond`` so that a skipped step costs no network
  evaluation) and ``carry`` is any pytree the hook threads through the scan, starting
  at ``hook_carry`` (FastFlow's bandits and velocity history,
  :mod:`jaxlab.generative.fastflow`; fixed velocity caching). The update
  ``x + v / N`` is the same, so a hook that returns ``evaluate()`` reproduces the
  plain sampler bit for bit.

  Args:
    velocity_fn: the field ``v(obs, x, t)``.
    obs: ``(B, obs_dim)``.
    noise: ``(B, action_dim)`` starting points, usually ``N(0, I)`` draws.
    num_steps: number of Euler steps N (static).
    hook: optional velocity hook (see above); ``None`` is the plain sampler, unchanged.
    hook_carry: the hook's initial carry (a pytree).

  Returns:
    ``(B, action_dim)`` samples; with a ``hook``, ``(samples, final hook carry)``.
  """
  num_steps = check_int(num_steps, "num_steps", lo=1)
  if hook is None:
    if hook_carry is not None:
      raise ValueError("hook_carry was given without a hook")

    def step(x, k):
      t = jnp.full((x.shape[0], 1), k / num_steps, x.dtype)
      return x + velocity_fn(obs, x, t) / num_steps, None

    x, _ = jax.lax.scan(step, noise, jnp.arange(num_steps))
    return x
  if not callable(hook):
    raise TypeError(f"hook must be callable, got {type(hook).__name__}")

  def hooked_step(carry, k):
    x, inner = carry
    t = jnp.full((x.shape[0], 1), k / num_steps, x.dtype)
    v, inner = hook(inner, k, x, t, lambda: velocity_fn(obs, x, t))
    return (x + v / num_steps, inner), None

  (x, inner), _ = jax.lax.scan(hooked_step, (noise, hook_carry), jnp.arange(num_steps))
  return x, inner


def divergence_exact(velocity_fn: VelocityFn, obs, x, t) -> jax.Array:
  """Trace of the Jacobian ``d v / d x`` per sample, ``(B,)``: one JVP per action dim."""
  dim = x.shape[-1]

  def jvp_along(e):
    tangent = jnp.broadcast_to(e, x.shape)
    return jax.jvp(lambda y: velocity_fn(obs, y, t), (x,), (tangent,))[1]

  columns = jax.vmap(jvp_along)(jnp.eye(dim, dtype=x.dtype))  # (dim, B, dim): J e_k
  return jnp.trace(columns, axis1=0, axis2=2)


def divergence_hutchinson(
    velocity_fn: VelocityFn, obs, x, t, key: jax.Array, num_probes: int = 8,
    probe: str = "rademacher",
) -> jax.Array:
  """Unbiased Hutchinson estimate ``mean_p e_p^T J e_p``, ``(B,)``.

  ``probe``: ``"rademacher"`` (entries +-1: the lower-variance choice) or ``"gaussian"``
  (standard normal entries); both have ``E[e e^T] = I``, so both are unbiased.
  """
  if probe not in PROBES:
    raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
  shape = (num_probes,) + x.shape
  probes = (jax.random.rademacher(key, shape, x.dtype) if probe == "rademacher"
            else jax.random.normal(key, shape, x.dtype))
  jv = jax.vmap(lambda e: jax.jvp(lambda y: velocity_fn(obs, y, t), (x,), (e,))[1])(probes)
  return jnp.mean(jnp.sum(probes * jv, axis=-1), axis=0)


def log_prob(
    velocity_fn: VelocityFn,
    obs: jax.Array,
    actions: jax.Array,
    *,
    num_steps: int = 10,
    divergence: str = "exact",
    key: jax.Array | None = None,
    num_probes: int = 8,
) -> jax.Array:
  r"""Log-density of ``actions`` under the flow, ``(B,)``.

  Backward Euler integration from :math:`x = a` at ``t = 1`` to ``t = 0``
  (FAC's behavior-proxy density, its Eq. for :math:`\log \hat\beta`):

  .. math::
    x \leftarrow x - v(s, x, t_k) / N, \qquad
    \log p = \log \mathcal N(x_0; 0, I) - \sum_k \nabla \cdot v(s, x, t_k) / N,

  with :math:`t_k = (k + 1) / N` for ``k = N - 1, ..., 0``, the divergence taken
  at the point the step starts from.

  Args:
    velocity_fn: the field ``v(obs, x, t)``.
    obs: ``(B, obs_dim)``.
    actions: ``(B, action_dim)``.
    num_steps: Euler steps N (static).
    divergence: ``"exact"`` (trace of the Jacobian, one JVP per action
      dimension), ``"hutchinson"`` (``num_probes`` Rademacher probes) or
      ``"hutchinson_gaussian"`` (Gaussian probes); the estimators need ``key``.
    key: PRNG key, required for the Hutchinson estimators.
    num_probes: probes per step for the Hutchinson estimators.

  Returns:
    ``(B,)`` log-densities.
  """
  num_steps = check_int(num_steps, "num_steps", lo=1)
  if divergence not in DIVERGENCES:
    raise ValueError(f"divergence must be one of {DIVERGENCES}, got {divergence!r}")
  estimated = divergence != "exact"
  if estimated:
    if key is None:
      raise ValueError(f"divergence={divergence!r} needs a PRNG key (key=...)")
    if not isinstance(num_probes, int) or num_probes < 1:
      raise ValueError(f"num_probes must be a positive int, got {num_probes!r}")
  keys = (jax.random.split(key, num_steps) if estimated
          else jnp.zeros((num_steps,), jnp.uint32))
  probe = "gaussian" if divergence == "hutchinson_gaussian" else "rademacher"

  def step(carry, inputs):
    x, div_sum = carry
    k, step_key = inputs
    t = jnp.full((x.shape[0], 1), (k + 1) / num_steps, x.dtype)
    if divergence == "exact":
      div = divergence_exact(velocity_fn, obs, x, t)
    else:
      div = divergence_hutchinson(velocity_fn, obs, x, t, step_key, num_probes, probe)
    return (x - velocity_fn(obs, x, t) / num_steps, div_sum + div / num_steps), None

  init = (actions, jnp.zeros(actions.shape[0], actions.dtype))
  (x0, div_sum), _ = jax.lax.scan(step, init, (jnp.arange(num_steps)[::-1], keys))
  dim = actions.shape[-1]
  log_normal = -0.5 * jnp.sum(x0 * x0, axis=-1) - 0.5 * dim * math.log(2 * math.pi)
  return log_normal - div_sum
