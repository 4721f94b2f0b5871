"""Scalar-vector factorization: critical step, GD outcomes, box counting."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.dynamics import factorization as F


@pytest.mark.parametrize("y,lam,expected", [
    (1.0, 0.0, 0.5), (1.0, 0.3, 1 / 1.4), (1.0, 0.7, 1 / 1.4), (-2.0, 0.5, 1 / 3),
    (0.2, 0.5, 1 / 0.7), (0.0, 0.0, math.inf)])
def test_critical_step_closed_form(y, lam, expected):
  assert F.critical_step_size(y, lam) == pytest.approx(expected)


@pytest.mark.parametrize("y,lam", [(1.0, 0.0), (1.0, 0.3), (0.2, 0.5), (-2.0, 0.5)])
def test_critical_step_matches_bisection(y, lam):
  """The formula against a purely numerical bisection (no sharpness test inside)."""
  eta = F.critical_step_size(y, lam)
  lo, hi = F.critical_step_bisection(jax.random.key(0), y, lam, num_starts=64, max_steps=3000,
                                     confirm_steps=1500, iters=10, bracket=(0.5 * eta, 2 * eta))
  assert hi - lo < 2e-3 * eta
  assert 0.98 * eta < lo <= 1.001 * eta  # finite max_steps can only stop it short of eta*


def test_bad_problem_raises():
  with pytest.raises(ValueError, match="lam"):
    F.critical_step_size(1.0, -0.1)
  with pytest.raises(ValueError, match="y must be finite"):
    F.critical_step_size(math.nan)
  with pytest.raises(ValueError, match="eta"):
    F.run_gd(jnp.ones(3), jnp.ones(3), y=1.0, lam=0.0, eta=0.0)
  with pytest.raises(ValueError, match="one shape"):
    F.run_gd(jnp.ones(3), jnp.ones(4), y=1.0, lam=0.0, eta=0.1)
  with pytest.raises(TypeError, match="floating"):
    F.run_gd(jnp.ones(3, jnp.int32), jnp.ones(3, jnp.int32), y=1.0, lam=0.0, eta=0.1)


@pytest.mark.parametrize("d", [1, 4])
@pytest.mark.parametrize("y,lam", [(1.0, 0.0), (1.0, 0.3), (-0.5, 0.8)])
def test_sharpness_is_top_hessian_eigenvalue(d, y, lam):
  x = jax.random.normal(jax.random.key(d), (2 * d,))
  ours, top = _sharpness_and_top_eigenvalue(x, y, lam)
  np.testing.assert_allclose(ours, top, rtol=1e-5)


@jax.jit  # one program per d (y and lam traced), not one per operation and case
def _sharpness_and_top_eigenvalue(x, y, lam):
  d = x.shape[0] // 2
  hess = jax.hessian(lambda z: F.loss(z[:d], z[d:], y, lam))(x)
  return F.sharpness(x[:d], x[d:], y, lam), jnp.linalg.eigvalsh(hess)[-1]


def test_gd_step_is_gradient_step_and_small_steps_reach_the_minimizers():
  u, v = jax.random.normal(jax.random.key(3), (2, 8, 4))
  gu, gv = jax.grad(lambda a, b: F.loss(a, b, 1.0, 0.3).sum(), argnums=(0, 1))(u, v)
  su, sv = F.gd_step(u, v, 1.0, 0.3, 0.1)
  np.testing.assert_allclose(su, u - 0.1 * gu, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(sv, v - 0.1 * gv, rtol=1e-5, atol=1e-6)
  res = F.run_gd(0.5 * u, 0.5 * v, y=1.0, lam=0.3, eta=0.05, max_steps=5000)
  assert bool(jnp.all(res.converged))
  # lam < |y|: the minimizers are u = v with ||u||^2 = y - lam, balanced, loss 2 lam y - lam^2.
  np.testing.assert_allclose(res.u, res.v, atol=1e-4)
  np.testing.assert_allclose(jnp.sum(res.u**2, -1), 0.7, atol=1e-4)
  np.testing.assert_allclose(res.balance, 0.0, atol=1e-4)
  np.testing.assert_allclose(F.loss(res.u, res.v, 1.0, 0.3), F.minimum_loss(1.0, 0.3), atol=1e-5)


def test_status_classes():
  # The origin is a saddle for |y| > lam: the gradient vanishes there at once.
  res = F.run_gd(jnp.zeros((1, 3)), jnp.zeros((1, 3)), y=1.0, lam=0.3, eta=0.1)
  assert int(res.status[0]) == F.STATIONARY and int(res.steps[0]) == 0
  res = F.run_gd(jnp.full((1, 3), 10.0), jnp.full((1, 3), 10.0), y=1.0, lam=0.0, eta=0.4)
  assert int(res.status[0]) == F.DIVERGED
  # Above eta* (1/0.7 here) this start collapses onto the invariant subspace u = v to
  # round-off and stops near the unstable origin: flagged, not counted as converged.
  u0 = jnp.array([[-0.22656623, 0.39429858, -0.04492579, 0.14757816, -0.49563408]])
  v0 = jnp.array([[-0.5822157, -0.01134865, 0.24430813, 0.37809053, -0.31075418]])
  res = F.run_gd(u0, v0, y=0.2, lam=0.5, eta=1.5187)
  assert int(res.status[0]) == F.UNSTABLE


def test_convergence_map_shapes_and_determinism():
  kw = dict(y=1.0, lam=0.3, eta=0.6, resolution=24, radius=2.5, max_steps=500)
  a = F.convergence_map(jax.random.key(1), **kw)
  b = F.convergence_map(jax.random.key(1), **kw)
  assert a.status.shape == a.steps.shape == a.norm.shape == (24, 24) and a.u.shape == (24, 24, 5)
  np.testing.assert_array_equal(a.status, b.status)
  np.testing.assert_array_equal(a.u, b.u)
  counts = np.bincount(np.asarray(a.status).ravel(), minlength=5)
  assert counts[F.CONVERGED] > 0 and counts[F.DIVERGED] > 0  # the slice crosses the boundary


def test_sensitivity_vanishes_at_small_steps():
  out = F.sensitivity(jax.random.key(0), y=1.0, lam=0.0, eta=0.1, num_pairs=128, scale=0.5)
  assert out["both_converged"] > 0.9
  assert out["different_minimizer"] == 0.0 and out["different_outcome"] == 0.0


def _koch(level: int) -> np.ndarray:
  pts = np.array([[0.0, 0.0], [1.0, 0.0]])
  rot = np.array([[0.5, -math.sqrt(3) / 2], [math.sqrt(3) / 2, 0.5]])
  for _ in range(level):
    a, b = pts[:-1], pts[1:]
    d = (b - a) / 3
    new = np.stack([a, a + d, a + d + d @ rot.T, a + 2 * d], axis=1).reshape(-1, 2)
    pts = np.concatenate([new, pts[-1:]])
  return pts


def _raster(points: np.ndarray, side: int) -> np.ndarray:
  t = np.linspace(0, 1, 16)[:, None, None]
  dense = (points[:-1][None] * (1 - t) + points[1:][None] * t).reshape(-1, 2)
  lo, span = dense.min(0), (dense.max(0) - dense.min(0)).max()
  ij = np.floor((dense - lo) / span * (side - 1)).astype(int)
  mask = np.zeros((side, side), bool)
  mask[ij[:, 1], ij[:, 0]] = True
  return mask


def test_box_counting_on_known_shapes():
  side = 1024
  line = np.zeros((side, side), bool)
  line[np.arange(side), (np.arange(side) * 0.6).astype(int)] = True
  square = np.zeros((side, side), bool)
  square[128:896, 64:832] = True  # box-aligned: no partial boxes at the edges
  disk = np.hypot(*np.mgrid[:side, :side] - side / 2) < side / 3
  koch = _raster(_koch(7), side)
  assert F.box_counting_dimension(line).dimension == pytest.approx(1.0, abs=0.03)
  assert F.box_counting_dimension(square).dimension == pytest.approx(2.0, abs=0.03)
  assert F.box_counting_dimension(F.boundary_mask(disk)).dimension == pytest.approx(1.0, abs=0.05)
  assert F.box_counting_dimension(koch).dimension == pytest.approx(math.log(4) / math.log(3),
                                                                   abs=0.05)
  with pytest.raises(ValueError, match="empty"):
    F.box_counting_dimension(np.zeros((64, 64), bool))
