r"""Gradient descent with large steps on scalar-vector factorization.

The model (Liang & Montufar's scalar-vector factorization with a ridge term):
a scalar target ``y`` is factorized as an inner product of two vectors
``u, v`` in ``R^d``, and plain gradient descent with a constant step ``eta``
runs on

.. math::
  L(u, v) = (u^\top v - y)^2 + \lambda (\|u\|^2 + \|v\|^2), \qquad
  u_{k+1} = u_k - 2\eta (r_k v_k + \lambda u_k), \quad
  v_{k+1} = v_k - 2\eta (r_k u_k + \lambda v_k), \quad r_k = u_k^\top v_k - y.

(The loss is not halved: a step ``eta`` here is a step ``2 eta`` on ``L / 2``.)

Minimizers, for ``y > 0`` (``y < 0`` is the mirror image ``v -> -v``):

* ``lambda = 0``: the hypersurface ``u^T v = y``;
* ``0 < lambda < |y|``: the sphere ``u = v``, ``||u||^2 = y - lambda``
  (stationarity gives ``r v = -lambda u`` and ``r u = -lambda v``, so ``r = -lambda``
  and ``u = v``), with loss ``2 lambda |y| - lambda^2``;
* ``lambda >= |y|``: the origin alone, with loss ``y^2``.

Critical step (:func:`critical_step_size`). GD converges to a minimizer from a
set of starts of positive measure iff some minimizer is linearly stable, i.e.
``eta < 2 / lambda_max(Hessian)`` at the flattest minimizer. With
``w = (v, u)`` and ``J`` the swap ``(a, b) -> (b, a)`` the Hessian is
``2 w w^T + 2 r J + 2 lambda I``:

* ``lambda = 0``: at ``u^T v = y`` its top eigenvalue is ``2(||u||^2 + ||v||^2)
  >= 4|y|`` (equality iff balanced, ``||u|| = ||v||``), so ``eta* = 1 / (2|y|)``;
* ``0 < lambda < |y|``: on the sphere the eigenvalues are ``4(|y| - lambda)``
  (along ``w``), ``4 lambda`` (antisymmetric directions ``(a, -a)``) and ``0``
  (along the sphere), so ``eta* = 1 / (2 max(|y| - lambda, lambda))``;
* ``lambda >= |y|``: at the origin the eigenvalues are ``2(lambda +- |y|)``, so
  ``eta* = 1 / (lambda + |y|)``.

The three cases agree where they meet; ``y = 1`` gives ``eta* = 1/2`` without
regularization and ``1/1.4`` with ``lambda = 0.3``. Above ``eta*`` every
minimizer is unstable and GD converges only from a null set. The derivation is
ours (the paper's statement was not available to us); tests check it against
:func:`critical_step_bisection`, which finds the largest step from which GD
still converges.

References:
  Liang, Montufar, "Gradient Descent with Large Step Sizes: Chaos and Fractal
  Convergence Region", arXiv 2509.25351, 2025.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from kernels_pallas.fractal_gd import CONVERGED, DIVERGED, RUNNING, gd_grid

# Status codes of :class:`GDResult`: the kernel's three, plus a stationary point
# that is not a minimizer (the saddle at the origin) and a minimizer that GD
# cannot stay at (sharpness >= 2 / eta: reached only through round-off, e.g.
# after the iterates collapse onto the invariant subspace u = v, and left again
# after enough further steps).
STATIONARY, UNSTABLE = 3, 4


def _check_problem(y, lam) -> tuple[float, float]:
  y, lam = float(y), float(lam)
  if not math.isfinite(y):
    raise ValueError(f"y must be finite, got {y}")
  if not (math.isfinite(lam) and lam >= 0):
    raise ValueError(f"lam must be finite and >= 0, got {lam}")
  return y, lam


def loss(u: jax.Array, v: jax.Array, y, lam) -> jax.Array:
  """``(u^T v - y)^2 + lam (||u||^2 + ||v||^2)`` over the last axis."""
  r = jnp.sum(u * v, axis=-1) - y
  return r * r + lam * (jnp.sum(u * u, axis=-1) + jnp.sum(v * v, axis=-1))


def gd_step(u: jax.Array, v: jax.Array, y, lam, eta) -> tuple[jax.Array, jax.Array]:
  """One simultaneous GD step on :func:`loss` (vectors on the last axis)."""
  r = jnp.sum(u * v, axis=-1, keepdims=True) - y
  return u - 2 * eta * (r * v + lam * u), v - 2 * eta * (r * u + lam * v)


def sharpness(u: jax.Array, v: jax.Array, y, lam) -> jax.Array:
  """The top eigenvalue of the Hessian of :func:`loss` at ``(u, v)``, in closed form.

  ``H = 2 w w^T + 2 r J + 2 lam I`` with ``w = (v, u)``, ``r = u^T v - y`` and ``J``
  the swap of the two halves. On the span of ``w``'s parts ``w_s = (s, s)``,
  ``w_a = (-a, a)`` (``s = (u + v) / 2``, ``a = (u - v) / 2``) ``H`` is the 2 x 2 matrix
  ``2 [[|w_s|^2, |w_s||w_a|], [., |w_a|^2]] + diag(2 lam + 2 r, 2 lam - 2 r)``; on the
  rest (``d >= 2``) its eigenvalues are ``2 lam +- 2 r``.
  """
  r = jnp.sum(u * v, axis=-1) - y
  s2 = jnp.sum(jnp.square(u + v), axis=-1) / 2  # |w_s|^2
  a2 = jnp.sum(jnp.square(u - v), axis=-1) / 2  # |w_a|^2
  p, q, off = 2 * s2 + 2 * lam + 2 * r, 2 * a2 + 2 * lam - 2 * r, 2 * jnp.sqrt(s2 * a2)
  top = (p + q) / 2 + jnp.sqrt(jnp.square((p - q) / 2) + off * off)
  if u.shape[-1] >= 2:
    top = jnp.maximum(top, 2 * lam + 2 * jnp.abs(r))
  return top


def minimum_loss(y, lam) -> float:
  """The loss at the minimizers: ``2 lam |y| - lam^2`` if ``lam < |y|``, else ``y^2``."""
  y, lam = _check_problem(y, lam)
  return 2 * lam * abs(y) - lam * lam if lam < abs(y) else y * y


def critical_step_size(y, lam=0.0) -> float:
  """The exact critical step ``eta*`` of GD on :func:`loss` (module docstring).

  Args:
    y: the scalar target.
    lam: the ridge coefficient, ``>= 0``.

  Returns:
    ``1 / (2 max(|y| - lam, lam))`` if ``lam < |y|``, else ``1 / (lam + |y|)``
    (``inf`` for ``y = lam = 0``).

  Example:
    >>> critical_step_size(1.0), round(critical_step_size(1.0, 0.3), 4)
    (0.5, 0.7143)
  """
  y, lam = _check_problem(y, lam)
  a = abs(y)
  top = 2 * max(a - lam, lam) if lam < a else lam + a  # lambda_max(H) / 2 at the flattest
  return math.inf if top == 0 else 1.0 / top


class GDResult(NamedTuple):
  """Where GD from each start stopped; every field has the starts' batch shape.

  ``status`` is ``RUNNING`` (still moving after ``max_steps``), ``CONVERGED``
  (reached a minimizer that is linearly stable for the step size), ``DIVERGED``,
  ``STATIONARY`` (gradient vanished away from the minimizers: a saddle) or
  ``UNSTABLE`` (stopped at a minimizer with sharpness ``>= 2 / eta``, which GD
  reaches only through round-off and leaves again given more steps).
  ``balance = ||u||^2 - ||v||^2`` and ``norm = sqrt(||u||^2 + ||v||^2)`` are
  taken at the stopping point, which is the limit point for converged starts.
  """
  u: jax.Array
  v: jax.Array
  steps: jax.Array
  status: jax.Array
  balance: jax.Array
  norm: jax.Array

  @property
  def converged(self) -> jax.Array:
    return self.status == CONVERGED

  @property
  def diverged(self) -> jax.Array:
    return self.status == DIVERGED


def run_gd(u0: jax.Array, v0: jax.Array, *, y, lam, eta, max_steps: int = 2000,
           tol: float = 1e-5, bound: float = 1e8, use_kernel: bool | None = None) -> GDResult:
  """GD from every start until it converges, diverges or runs ``max_steps`` steps.

  Args:
    u0, v0: starts of shape ``(..., d)`` (any batch shape; float32 or float64).
    y, lam, eta: the problem (:func:`loss`) and the step size.
    max_steps: cap on GD steps per start.
    tol: a start stops when ``||grad L|| < tol``; it has converged if its loss is
      then within ``10 tol`` of :func:`minimum_loss` and its :func:`sharpness` is
      below ``2 / eta``.
    bound: a start has diverged once ``||u||^2 + ||v||^2 >= bound``.
    use_kernel: the Pallas kernel (default on GPU/TPU) or the jnp reference.

  Returns:
    A :class:`GDResult` with the batch shape of the starts.

  Precision: close to ``eta*`` the last approach to a minimizer contracts by
  only ``|1 - eta s|`` per step (``s`` its sharpness, ``eta s`` near 2), and
  float32 iterates can lock into a round-off 2-cycle of amplitude about
  ``1e-5`` that never meets ``tol`` (they stay ``RUNNING``). Use float64
  starts under ``jax.enable_x64(True)`` with a smaller ``tol`` there.
  """
  y, lam = _check_problem(y, lam)
  u0, v0 = jnp.asarray(u0), jnp.asarray(v0)
  if u0.shape != v0.shape or u0.ndim < 1:
    raise ValueError(f"u0 and v0 must have one shape (..., d), got {u0.shape} and {v0.shape}")
  if not jnp.issubdtype(u0.dtype, jnp.floating):
    raise TypeError(f"u0 and v0 must be floating point, got {u0.dtype}")
  if not (float(eta) > 0 and math.isfinite(float(eta))):
    raise ValueError(f"eta must be a positive finite step size, got {eta}")
  if not (isinstance(max_steps, int) and max_steps >= 1):
    raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
  batch, d = u0.shape[:-1], u0.shape[-1]
  flat = lambda x: x.reshape(-1, d).T
  u, v, steps, status = gd_grid(flat(u0), flat(v0.astype(u0.dtype)), y, lam, eta, tol, bound,
                                max_steps=max_steps, use_kernel=use_kernel)
  u, v = u.T.reshape(*batch, d), v.T.reshape(*batch, d)
  steps, status = steps.reshape(batch), status.reshape(batch)
  at_min = loss(u, v, y, lam) - minimum_loss(y, lam) < 10 * tol
  stable = sharpness(u, v, y, lam) * eta < 2
  stopped = status == CONVERGED
  status = jnp.where(stopped & ~at_min, STATIONARY,
                     jnp.where(stopped & ~stable, UNSTABLE, status))
  uu, vv = jnp.sum(u * u, -1), jnp.sum(v * v, -1)
  return GDResult(u, v, steps, status, uu - vv, jnp.sqrt(uu + vv))


class Slice(NamedTuple):
  """A 2-D slice ``center + a e1 + b e2`` of the ``2d``-dimensional start space."""
  center: jax.Array  # (2d,) = concat(u, v)
  e1: jax.Array
  e2: jax.Array


def random_slice(key: jax.Array, dim: int, center=None) -> Slice:
  """A uniformly random orthonormal 2-plane through ``center`` (default the origin)."""
  if not (isinstance(dim, int) and dim >= 1):
    raise ValueError(f"dim must be a positive int, got {dim!r}")
  q, _ = jnp.linalg.qr(jax.random.normal(key, (2 * dim, 2)))
  c = jnp.zeros(2 * dim) if center is None else jnp.asarray(center, jnp.float32)
  if c.shape != (2 * dim,):
    raise ValueError(f"center must have shape ({2 * dim},), got {c.shape}")
  return Slice(c, q[:, 0], q[:, 1])


def slice_grid(plane: Slice, resolution: int, radius: float, dtype=jnp.float32):
  """Starts ``(u0, v0)`` of shape ``(resolution, resolution, d)`` at cell centres of
  ``[-radius, radius]^2`` on the plane (rows: ``e2`` from top, columns: ``e1``)."""
  if not (isinstance(resolution, int) and resolution >= 2):
    raise ValueError(f"resolution must be an int >= 2, got {resolution!r}")
  if not radius > 0:
    raise ValueError(f"radius must be > 0, got {radius}")
  h = 2 * radius / resolution
  a = -radius + h * (np.arange(resolution) + 0.5)
  b = a[::-1]
  pts = (plane.center[None, None] + jnp.asarray(a)[None, :, None] * plane.e1
         + jnp.asarray(b)[:, None, None] * plane.e2).astype(dtype)
  d = plane.center.shape[0] // 2
  return pts[..., :d], pts[..., d:]


def convergence_map(key: jax.Array, *, y, lam, eta, dim: int = 5, resolution: int = 256,
                    radius: float = 2.5, max_steps: int = 2000, tol: float = 1e-5,
                    dtype=jnp.float32, use_kernel: bool | None = None) -> GDResult:
  """GD from every start of a ``resolution x resolution`` grid on a random 2-D slice.

  The slice is :func:`random_slice` through the origin with ``key``; each grid
  point is one start ``(u0, v0)`` in ``R^dim x R^dim``. Returns a
  :class:`GDResult` of shape ``(resolution, resolution)``: converged or not,
  where it stopped (``balance``, ``norm``, ``u``, ``v``) and after how many
  steps. The paper's figure: ``y = 1``, ``lam = 0.3``, ``(u, v)`` in ``R^10``.
  ``dtype=jnp.float64`` needs ``jax.enable_x64`` (see :func:`run_gd` on float32
  near ``eta*``).
  """
  u0, v0 = slice_grid(random_slice(key, dim), resolution, radius, dtype)
  return run_gd(u0, v0, y=y, lam=lam, eta=eta, max_steps=max_steps, tol=tol,
                use_kernel=use_kernel)


def _minimizer_starts(key, y, lam, dim, n, noise, dtype):
  """Points on the flattest minimizers (balanced / the sphere / the origin) plus noise."""
  k1, k2, k3 = jax.random.split(key, 3)
  a = abs(y)
  scale2 = a - lam if lam < a else 0.0  # ||u||^2 = ||v||^2 at a balanced minimizer
  direction = jax.random.normal(k1, (n, dim))
  direction = direction / jnp.linalg.norm(direction, axis=-1, keepdims=True)
  u = math.sqrt(scale2) * direction
  v = u * (1.0 if y >= 0 else -1.0)
  return ((u + noise * jax.random.normal(k2, u.shape)).astype(dtype),
          (v + noise * jax.random.normal(k3, v.shape)).astype(dtype))


def critical_step_bisection(key: jax.Array, y, lam=0.0, *, dim: int = 5, num_starts: int = 256,
                            noise: float = 1e-2, max_steps: int = 4000,
                            confirm_steps: int = 2000, iters: int = 16, bracket=None,
                            tol: float = 1e-5) -> tuple[float, float]:
  """A numerical bracket ``(lo, hi)`` on the largest step from which GD converges.

  A step counts as convergent if GD reaches a minimizer within ``max_steps``
  from at least one of ``num_starts`` starts (half near the flattest
  minimizers, ``noise`` away; half Gaussian with the minimizers' scale) and
  is still there after ``confirm_steps`` further steps. The check is purely
  numerical: it does not use the sharpness test of :func:`run_gd`, so it is an
  independent check of :func:`critical_step_size`. The ``bracket`` (default
  ``[0.05, 20] / (lam + |y|)``) must hold a convergent and a non-convergent
  step; it is halved ``iters`` times.
  Near ``eta*`` convergence slows (the contraction factor tends to 1), so
  ``lo`` sits slightly below ``eta*`` for a finite ``max_steps``.
  """
  y, lam = _check_problem(y, lam)
  if abs(y) + lam == 0:
    raise ValueError("y = lam = 0 has eta* = inf: nothing to bisect")
  ka, kb = jax.random.split(key)
  half = num_starts // 2
  u1, v1 = _minimizer_starts(ka, y, lam, dim, half, noise, jnp.float32)
  scale = math.sqrt((abs(y) + lam) / dim)
  u2, v2 = scale * jax.random.normal(kb, (2, num_starts - half, dim))
  u0, v0 = jnp.concatenate([u1, u2]), jnp.concatenate([v1, v2])

  min_loss = minimum_loss(y, lam)

  def converges(eta):
    res = run_gd(u0, v0, y=y, lam=lam, eta=eta, max_steps=max_steps, tol=tol)
    hit = np.asarray((res.status == CONVERGED) | (res.status == UNSTABLE))
    if not hit.any():
      return False
    # Keep going from where they stopped (tol = 0: no early stop) and check they stayed.
    # All starts go (fixed shapes, one compilation); only the ones that stopped count.
    u, v, _, status = gd_grid(res.u.T, res.v.T, y, lam, eta, 0.0, 1e8, max_steps=confirm_steps)
    u, v = u.T, v.T
    r = jnp.sum(u * v, -1, keepdims=True) - y
    grad2 = jnp.sum(jnp.square(r * v + lam * u) + jnp.square(r * u + lam * v), -1) * 4
    stayed = (hit & (status == RUNNING) & (grad2 < tol**2)
              & (loss(u, v, y, lam) - min_loss < 10 * tol))
    return bool(jnp.any(stayed))

  lo, hi = bracket if bracket is not None else (0.05 / (abs(y) + lam), 20.0 / (abs(y) + lam))
  if not converges(lo) or converges(hi):
    raise RuntimeError(f"bracket [{lo}, {hi}] does not contain the critical step")
  for _ in range(iters):
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if converges(mid) else (lo, mid)
  return lo, hi


def sensitivity(key: jax.Array, *, y, lam, eta, dim: int = 5, num_pairs: int = 1024,
                scale: float = 1.0, separation: float = 1e-6, max_steps: int = 4000,
                tol: float = 1e-7, distinct: float = 1e-3) -> dict[str, float]:
  """How often starts ``separation`` apart end at different minimizers.

  ``num_pairs`` Gaussian starts (std ``scale``), each with a partner moved by
  ``separation`` in a random direction; run in float64 (``jax.enable_x64``) so
  the offset is resolved. Two converged partners reach different minimizers
  when their limit points are more than ``distinct`` apart.

  Returns:
    ``both_converged`` (fraction of pairs), ``different_minimizer`` (fraction of
    the both-converged pairs), ``different_outcome`` (one converges, the other
    does not) and ``converged`` (fraction of all starts).
  """
  k1, k2 = jax.random.split(key)
  with jax.enable_x64(True):
    x = scale * np.asarray(jax.random.normal(k1, (num_pairs, 2 * dim)), np.float64)
    dx = np.asarray(jax.random.normal(k2, (num_pairs, 2 * dim)), np.float64)
    x2 = x + separation * dx / np.linalg.norm(dx, axis=-1, keepdims=True)
    starts = jnp.asarray(np.stack([x, x2]))
    res = run_gd(starts[..., :dim], starts[..., dim:], y=y, lam=lam, eta=eta,
                 max_steps=max_steps, tol=tol)
    conv = np.asarray(res.converged)
    limit = np.concatenate([np.asarray(res.u), np.asarray(res.v)], axis=-1)
  both = conv[0] & conv[1]
  gap = np.linalg.norm(limit[0] - limit[1], axis=-1)
  amp = gap[both] / separation if both.any() else np.full(1, np.nan)
  return {"converged": float(conv.mean()), "both_converged": float(both.mean()),
          "different_minimizer": float((both & (gap > distinct)).sum() / max(both.sum(), 1)),
          "different_outcome": float((conv[0] != conv[1]).mean()),
          "amplification_median": float(np.median(amp)),
          "amplification_p99": float(np.percentile(amp, 99))}


class BoxCount(NamedTuple):
  """Box-counting fit: ``dimension`` is the slope of ``log counts`` vs ``log(1/sizes)``."""
  dimension: float
  sizes: np.ndarray
  counts: np.ndarray


def boundary_mask(mask) -> np.ndarray:
  """Cells of a 2-D boolean ``mask`` with a 4-neighbour of the other value."""
  m = np.asarray(mask, bool)
  if m.ndim != 2:
    raise ValueError(f"mask must be 2-D, got shape {m.shape}")
  out = np.zeros_like(m)
  dv = m[1:] != m[:-1]
  dh = m[:, 1:] != m[:, :-1]
  out[1:] |= dv
  out[:-1] |= dv
  out[:, 1:] |= dh
  out[:, :-1] |= dh
  return out


def box_counting_dimension(mask, sizes=None) -> BoxCount:
  """Box-counting (Minkowski) dimension of the set of ``True`` cells of a 2-D mask.

  Counts the boxes of side ``s`` (``s`` in ``sizes``, default the powers of two
  from 2 to a sixteenth of the mask's side) that hold at least one cell, and
  fits ``log N(s) = D log(1/s) + c`` by least squares. For the boundary of a
  convergence region pass ``boundary_mask(converged)``.

  Example:
    >>> line = np.eye(512, dtype=bool)
    >>> round(box_counting_dimension(line).dimension, 2)
    1.0
  """
  m = np.asarray(mask, bool)
  if m.ndim != 2:
    raise ValueError(f"mask must be 2-D, got shape {m.shape}")
  if not m.any():
    raise ValueError("mask is empty: no set to measure")
  side = max(m.shape)
  if sizes is None:
    sizes = [2**k for k in range(1, 20) if 2**k <= side // 16]
  sizes = np.asarray(sizes, int)
  if len(sizes) < 2 or np.any(sizes < 1):
    raise ValueError(f"need at least two box sizes >= 1, got {sizes.tolist()} "
                     f"(the mask's side {side} is too small for the default sizes?)")
  counts = []
  for s in sizes:
    h, w = -(-m.shape[0] // s) * s, -(-m.shape[1] // s) * s
    p = np.zeros((h, w), bool)
    p[:m.shape[0], :m.shape[1]] = m
    counts.append(int(p.reshape(h // s, s, w // s, s).any(axis=(1, 3)).sum()))
  counts = np.asarray(counts)
  slope = np.polyfit(np.log(1.0 / sizes), np.log(counts), 1)[0]
  return BoxCount(float(slope), sizes, counts)


__all__ = [
    "CONVERGED", "DIVERGED", "RUNNING", "STATIONARY", "UNSTABLE", "BoxCount", "GDResult", "Slice",
    "boundary_mask", "box_counting_dimension", "convergence_map", "critical_step_bisection",
    "critical_step_size", "gd_step", "loss", "minimum_loss", "random_slice", "run_gd",
    "sensitivity", "sharpness", "slice_grid"]
