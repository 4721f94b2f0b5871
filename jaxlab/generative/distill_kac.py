r"""DistillKac: damped-wave (Kac) flows, AB-2 / CFG sampling and endpoint distillation.

Each coordinate of the noise is a 1-D Kac process ``K_s``: it moves at speed ``c``, its
direction flips at the events of a Poisson process of rate ``a``, and its initial
direction is a fair random sign. Its law solves the damped wave (telegrapher's)
equation :math:`\partial_{ss} p + 2a\,\partial_s p = c^2 \partial_{yy} p`. The marginal
of ``K_s`` has atoms at ``+-cs`` (no flip: probability ``e^{-as}``, half each) and on
``|y| < cs`` the density

.. math::
  p_s(y) = \frac{e^{-as}}{2c}\Big[a I_0(z) + \frac{a c s}{r} I_1(z)\Big],
  \qquad r = \sqrt{c^2 s^2 - y^2}, \quad z = a r / c .

The forward process is ``x_t = f(t) x_0 + K_{g(t)}`` with ``f = 1 - t/T`` and ``g(t) =
t`` (defaults ``a = 9, c = 3, T = 1``), so ``x_T = K_T`` is pure Kac noise. The
regression target is ``u = f'(t) x_0 + g'(t) v_K(x_t - f x_0, g(t))`` with the Kac
velocity in its Bessel-ratio form

.. math::
  v_K(y, s) = \frac{y}{s + (r/c)\, I_0(z)/I_1(z)},

``v_K = sign(y) c`` on and near the light cone ``|y| >= cs (1 - eps)`` (the atoms move
at speed ``c``), and the small-argument limit ``(r/c) I_0(z)/I_1(z) -> 2/a`` (the
denominator ``s + 2/a``) where ``z`` underflows. ``|v_K| <= c`` everywhere.

Sampling integrates ``dx/dt = u(x, t)`` from ``x_T ~ K_T`` down to ``t = 0`` through the
shared :func:`jaxlab.nn.flows.euler_sample` (sampler time ``tau = 1 - t/T``; no second
sampler loop): Euler, or Adams-Bashforth 2 as a velocity hook (``v_eff = 1.5 v_i - 0.5
v_{i-1}``, Euler at the first step). Classifier-free guidance acts on velocities,
``u_w = (1 + w) u_cond - w u_uncond`` (:func:`cfg_velocity`). Endpoint-only distillation
(:func:`distill_loss`): a student with ``M`` steps (``Delta = T / M``) matches, from
``x_{t_k}`` of the forward process at a grid time ``t_k``, the endpoint of ``N``
Euler substeps of its teacher from ``t_k`` to ``t_k - Delta`` with one Euler step,
loss ``mean ||student_end - teacher_end||^2``; stages ``100 -> 20 -> 4 -> 2 -> 1`` each
distil the previous student, which the new student starts as a copy of.

What is the paper's and what is ours: the process, density, velocity (with its cone rule
and small-``z`` limit), the forward process and defaults, velocity-space CFG and the
endpoint loss with its stage schedule follow the spec (the paper and the telegraphers
code it builds on). Ours: the exact simulation with a fixed budget of ``max_flips``
exponential inter-arrival times (beyond it the path keeps its last direction; with
``a s = 9`` the chance of more than 40 flips is below ``1e-12``), the cone tolerance
``eps = 1e-4``, the small-``z`` threshold, the loss averaged over coordinates (the
squared norm divided by the dimension), and uniform sampling of the student's grid
index.

Example:
  >>> x0 = ...                                   # (B, D) data in [-1, 1]
  >>> loss = kac_loss(field, obs, x0, key)       # train through jaxlab.training.fit
  >>> xT = sample_kac(key, T, (B, D))            # Kac noise
  >>> x, speed = kac_sample(field, obs, xT, 100, method="ab2")

References:
  DistillKac: Few-Step Image Generation via Damped Wave Equations, arXiv:2509.21513
  (ICLR 2026). Duong et al., arXiv:2506.20641 (the Kac flow it distils).
  M. Kac, "A stochastic model related to the telegrapher's equation", Rocky Mountain
  J. Math. 4, 1974.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.special import i0e, i1e

from jaxlab.core.checks import check_int, check_range
from jaxlab.nn.flows import VelocityFn, euler_sample

__all__ = ["METHODS", "STAGES", "ab2_hook", "cfg_velocity", "distill_loss", "forward_process",
           "kac_atom_mass", "kac_density", "kac_loss", "kac_sample", "kac_velocity",
           "sample_kac", "target_velocity"]

METHODS = ("euler", "ab2")
STAGES = (100, 20, 4, 2, 1)   # the spec's distillation schedule (student steps per stage)
EPS = 1e-4                    # cone tolerance: |y| >= cs (1 - EPS) moves at sign(y) c (ours)
SMALL_Z = 1e-3                # below it, (r/c) I0/I1 is its limit 2/a (ours)


def _check_ac(a, c) -> None:
  check_range(a, "a", lo=0.0, lo_open=True)
  check_range(c, "c", lo=0.0, lo_open=True)


def sample_kac(key: jax.Array, s, shape: tuple[int, ...], *, a: float = 9.0, c: float = 3.0,
               max_flips: int = 40) -> jax.Array:
  """Exact draws of ``K_s``, one independent Kac path per element of ``shape``.

  Each path starts at 0 with a random sign, moves at speed ``c``, and flips at the
  cumulative sums of ``max_flips`` ``Exp(a)`` inter-arrival times; the position at time
  ``s`` is ``c sigma sum_j (-1)^j |[T_j, T_{j+1}] cap [0, s]|``. Beyond the last of the
  ``max_flips`` flips the path keeps its direction (a truncation; ``P(N_s > 40) < 1e-12``
  at ``a s = 9``).

  Args:
    key: PRNG key.
    s: time ``>= 0``, a scalar or an array broadcastable to ``shape`` (per-sample times).
    shape: output shape.
    a, c: flip rate and speed.
    max_flips: the fixed budget of inter-arrival times (static).

  Returns:
    ``shape`` float32 positions in ``[-cs, cs]``.
  """
  _check_ac(a, c)
  max_flips = check_int(max_flips, "max_flips", lo=1)
  if not isinstance(shape, tuple):
    raise TypeError(f"shape must be a tuple, got {type(shape).__name__}")
  check_range(s, "s", lo=0.0, scalar=False)
  k_sign, k_gap = jax.random.split(key)
  sign = jnp.where(jax.random.bernoulli(k_sign, 0.5, shape), 1.0, -1.0)
  gaps = jax.random.exponential(k_gap, (*shape, max_flips)) / a
  flips = jnp.cumsum(gaps, axis=-1)
  s_ = jnp.broadcast_to(jnp.asarray(s, jnp.float32), shape)[..., None]
  starts = jnp.concatenate([jnp.zeros((*shape, 1)), flips], axis=-1)
  ends = jnp.concatenate([flips, jnp.full((*shape, 1), jnp.inf)], axis=-1)
  lengths = jnp.clip(jnp.minimum(ends, s_) - starts, 0.0, None)
  alternate = jnp.where(jnp.arange(max_flips + 1) % 2 == 0, 1.0, -1.0)
  return c * sign * jnp.sum(lengths * alternate, axis=-1)


def kac_atom_mass(s, *, a: float = 9.0) -> jax.Array:
  """Total probability of the two atoms at ``+-cs``: ``e^{-as}`` (half at each)."""
  return jnp.exp(-a * jnp.asarray(s, jnp.float32))


def kac_density(y, s, *, a: float = 9.0, c: float = 3.0) -> jax.Array:
  r"""The continuous part of the law of ``K_s`` at ``y`` (0 outside ``|y| < cs``).

  ``e^{-as}/(2c) [a I0(z) + a c s I1(z) / r]`` computed with the scaled Bessel functions
  (``e^{-as} I(z) = I_e(z) e^{z - as}``, ``z <= as``) and ``I1(z)/r -> a / (2c)`` at
  ``r = 0``. It integrates to ``1 - e^{-as}``.
  """
  _check_ac(a, c)
  y = jnp.asarray(y, jnp.float32)
  s = jnp.asarray(s, jnp.float32)
  r2 = c * c * s * s - y * y
  inside = r2 > 0
  r = jnp.sqrt(jnp.where(inside, r2, 1.0))
  z = a * r / c
  damp = jnp.exp(z - a * s)
  i1_over_r = jnp.where(z < SMALL_Z, a / (2 * c), i1e(z) / r)
  dens = damp / (2 * c) * (a * i0e(z) + a * c * s * i1_over_r)
  return jnp.where(inside, dens, 0.0)


def kac_velocity(y, s, *, a: float = 9.0, c: float = 3.0, eps: float = EPS) -> jax.Array:
  r"""``v_K(y, s) = y / (s + (r/c) I0(z)/I1(z))``; ``sign(y) c`` near the cone.

  ``|y| >= cs (1 - eps)`` (the atoms, and ``y = 0`` at ``s = 0``) gives ``sign(y) c``; for
  ``z < SMALL_Z`` the ratio term is its limit ``2/a``. ``|v_K| <= c``.
  """
  _check_ac(a, c)
  check_range(eps, "eps", lo=0.0, hi=1.0)
  y = jnp.asarray(y, jnp.float32)
  s = jnp.asarray(s, jnp.float32)
  cone = jnp.abs(y) >= c * s * (1 - eps)
  r = jnp.sqrt(jnp.where(cone, 1.0, c * c * s * s - y * y))
  z = a * r / c
  ratio = jnp.where(z < SMALL_Z, 2.0 / a, (r / c) * i0e(z) / jnp.where(z < SMALL_Z, 1.0, i1e(z)))
  v = y / (s + ratio)
  return jnp.where(cone, jnp.sign(y) * c, v)


def forward_process(key: jax.Array, x0: jax.Array, t: jax.Array, *, a: float = 9.0,
                    c: float = 3.0, T: float = 1.0, max_flips: int = 40
                    ) -> tuple[jax.Array, jax.Array]:
  """``(x_t, y)`` with ``y = K_t`` and ``x_t = (1 - t/T) x0 + y``; ``t`` is ``(B, 1)``."""
  y = sample_kac(key, t, x0.shape, a=a, c=c, max_flips=max_flips)
  return (1.0 - t / T) * x0 + y, y


def target_velocity(x0: jax.Array, y: jax.Array, t: jax.Array, *, a: float = 9.0,
                    c: float = 3.0, T: float = 1.0) -> jax.Array:
  """``u = f'(t) x0 + g'(t) v_K(y, g(t)) = -x0 / T + v_K(y, t)``."""
  return -x0 / T + kac_velocity(y, t, a=a, c=c)


def _check_batch(obs, x0) -> None:
  if getattr(x0, "ndim", None) != 2:
    raise ValueError(f"x0 must be (B, D), got shape {getattr(x0, 'shape', None)}")
  if getattr(obs, "ndim", None) != 2 or obs.shape[0] != x0.shape[0]:
    raise ValueError(f"obs must be (B, obs_dim) with B = {x0.shape[0]}, got shape "
                     f"{getattr(obs, 'shape', None)}")


def kac_loss(velocity_fn: VelocityFn, obs: jax.Array, x0: jax.Array, key: jax.Array, *,
             a: float = 9.0, c: float = 3.0, T: float = 1.0, label_dropout: float = 0.0,
             max_flips: int = 40) -> jax.Array:
  """MSE between ``velocity_fn(obs, x_t, t)`` and the target ``u`` at ``t ~ U(0, T)``.

  ``velocity_fn`` takes the physical time ``t`` as ``(B, 1)``. With ``label_dropout``
  the conditioning rows ``obs`` are zeroed with that probability (the unconditional
  model of classifier-free guidance is ``obs = 0``).
  """
  _check_batch(obs, x0)
  _check_ac(a, c)
  check_range(T, "T", lo=0.0, lo_open=True)
  check_range(label_dropout, "label_dropout", lo=0.0, hi=1.0)
  k_t, k_k, k_drop = jax.random.split(key, 3)
  b = x0.shape[0]
  t = jax.random.uniform(k_t, (b, 1), minval=0.0, maxval=T)
  xt, y = forward_process(k_k, x0, t, a=a, c=c, T=T, max_flips=max_flips)
  keep = jax.random.bernoulli(k_drop, 1.0 - label_dropout, (b, 1))
  pred = velocity_fn(obs * keep, xt, t)
  return jnp.mean((pred - target_velocity(x0, y, t, a=a, c=c, T=T)) ** 2)


def cfg_velocity(velocity_fn: VelocityFn, w: float) -> VelocityFn:
  """Classifier-free guidance in velocity space: ``(1 + w) u(obs) - w u(0)``."""
  check_range(w, "w")
  if not callable(velocity_fn):
    raise TypeError(f"velocity_fn must be callable, got {type(velocity_fn).__name__}")

  def guided(obs, x, t):
    return (1.0 + w) * velocity_fn(obs, x, t) - w * velocity_fn(jnp.zeros_like(obs), x, t)

  return guided


def ab2_hook(carry, k, x, t, evaluate):
  """Adams-Bashforth 2 as a :func:`euler_sample` hook; ``carry = (v_prev, |v| max per step)``.

  ``v_eff = 1.5 v_k - 0.5 v_{k-1}``, plain Euler at ``k = 0``. The carry also records
  the largest ``|v_k|`` of each step (see :func:`kac_sample`).
  """
  v_prev, vmax = carry
  v = evaluate()
  v_eff = jnp.where(k == 0, v, 1.5 * v - 0.5 * v_prev)
  return v_eff, (v, vmax.at[k].set(jnp.max(jnp.abs(v))))


def _euler_hook(carry, k, x, t, evaluate):
  v_prev, vmax = carry
  v = evaluate()
  return v, (v, vmax.at[k].set(jnp.max(jnp.abs(v))))


def _reversed(velocity_fn: VelocityFn, t_start, span) -> VelocityFn:
  """The field in sampler time ``tau in [0, 1]``: physical ``t = t_start - tau span``."""
  return lambda obs, x, tau: -span * velocity_fn(obs, x, t_start - tau * span)


def kac_sample(velocity_fn: VelocityFn, obs: jax.Array, x_T: jax.Array, num_steps: int, *,
               T: float = 1.0, method: str = "euler") -> tuple[jax.Array, jax.Array]:
  """Integrates ``dx/dt = u(obs, x, t)`` from ``x_T`` at ``t = T`` to ``t = 0``.

  Runs the shared :func:`jaxlab.nn.flows.euler_sample` on the time-reversed field (step
  ``x - (T / N) u(x, t_k)``, ``t_k = T (1 - k/N)``), with the AB-2 hook for ``method =
  "ab2"``. NFE = ``num_steps``.

  Returns:
    ``(x_0, speed)``: the samples and ``(num_steps,)`` the largest ``|u|`` per coordinate
    over the batch at each step (evaluated velocities, physical time units).
  """
  num_steps = check_int(num_steps, "num_steps", lo=1)
  check_range(T, "T", lo=0.0, lo_open=True)
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")
  _check_batch(obs, x_T)
  hook = ab2_hook if method == "ab2" else _euler_hook
  carry = (jnp.zeros_like(x_T), jnp.zeros((num_steps,), x_T.dtype))
  x, (_, vmax) = euler_sample(_reversed(velocity_fn, T, T), obs, x_T, num_steps, hook=hook,
                              hook_carry=carry)
  return x, vmax / T


def distill_loss(student_fn: VelocityFn, teacher_fn: VelocityFn, obs: jax.Array,
                 x0: jax.Array, key: jax.Array, *, student_steps: int, teacher_substeps: int,
                 a: float = 9.0, c: float = 3.0, T: float = 1.0,
                 max_flips: int = 40) -> jax.Array:
  """Endpoint-only distillation loss of one stage.

  ``t_k = k T / M`` with ``k ~ U{1..M}`` (``M = student_steps``), ``x_{t_k}`` from the
  forward process; the teacher target is ``teacher_substeps`` Euler steps of
  ``teacher_fn`` from ``t_k`` to ``t_k - Delta`` (no gradient), the student one Euler
  step ``x - Delta u_student(x, t_k)``; loss ``mean (student_end - teacher_end)^2``.
  """
  _check_batch(obs, x0)
  student_steps = check_int(student_steps, "student_steps", lo=1)
  teacher_substeps = check_int(teacher_substeps, "teacher_substeps", lo=1)
  check_range(T, "T", lo=0.0, lo_open=True)
  k_idx, k_fwd = jax.random.split(key)
  b = x0.shape[0]
  delta = T / student_steps
  t = jax.random.randint(k_idx, (b, 1), 1, student_steps + 1).astype(jnp.float32) * delta
  xt, _ = forward_process(k_fwd, x0, t, a=a, c=c, T=T, max_flips=max_flips)
  teacher_end = jax.lax.stop_gradient(
      euler_sample(_reversed(teacher_fn, t, delta), obs, xt, teacher_substeps))
  student_end = euler_sample(_reversed(student_fn, t, delta), obs, xt, 1)
  return jnp.mean((student_end - teacher_end) ** 2)
