"""The GD grid kernel against its jnp reference (interpret mode)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret  # races
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.fractal_gd import CONVERGED, DIVERGED, gd_grid_pallas, gd_grid_reference


@pytest.mark.parametrize("d,n,lam,eta", [(5, 700, 0.3, 0.69), (1, 300, 0.0, 0.45),
                                         (3, 129, 0.5, 1.3)])
def test_kernel_matches_reference(d, n, lam, eta):
  u, v = 1.2 * jax.random.normal(jax.random.key(d + n), (2, d, n))
  args = (u, v, 1.0 if lam < 0.5 else 0.2, lam, eta, 1e-5, 1e8)
  ref = gd_grid_reference(*args, max_steps=400, chunk=128)
  ker = gd_grid_pallas(*args, max_steps=400, block=128, interpret=True)
  for r, k in zip(ref, ker, strict=True):
    np.testing.assert_array_equal(r, k)
  status = np.asarray(ref[3])
  assert (status == CONVERGED).any() and (status == DIVERGED).any()


def test_steps_count_and_cap():
  # A start at a minimizer stops after 0 steps; one that cannot finish reports max_steps.
  u = jnp.array([[1.0, 1e-3]])  # d = 1: u v = 1 at (1, 1); (1e-3, 1e-3) is slow to leave
  res = gd_grid_reference(u, u, 1.0, 0.0, 1e-4, 1e-6, 1e8, max_steps=50)
  np.testing.assert_array_equal(res[2], [0, 50])
  np.testing.assert_array_equal(res[3], [CONVERGED, 0])
  with pytest.raises(ValueError, match="power of two"):
    gd_grid_pallas(u, u, 1.0, 0.0, 0.1, 1e-6, 1e8, max_steps=5, block=100, interpret=True)


# -- against a NumPy loop of GD steps, one start at a time ---------------------------------
def _np_gd(u, v, y, lam, eta, tol, bound, max_steps):
  """Check, then step: stop when ||grad|| < tol (converged), ||(u, v)||^2 >= bound or a
  non-finite gradient (diverged), or after max_steps steps (running)."""
  f = np.float32
  y, lam, eta, tol2, bound = (f(x) for x in (y, lam, eta, tol * tol, bound))
  u, v = np.array(u, f), np.array(v, f)
  steps, status = np.zeros(u.shape[1], int), np.zeros(u.shape[1], int)
  with np.errstate(over="ignore", invalid="ignore"):
    for j in range(u.shape[1]):
      a, b = u[:, j].copy(), v[:, j].copy()
      for t in range(max_steps + 1):
        r = np.sum(a * b) - y
        ga, gb = f(2) * (r * b + lam * a), f(2) * (r * a + lam * b)
        g2, n2 = np.sum(ga * ga + gb * gb), np.sum(a * a + b * b)
        if not (n2 < bound and g2 < np.inf):
          status[j] = DIVERGED
          break
        if g2 < tol2:
          status[j] = CONVERGED
          break
        if t == max_steps:  # max_steps steps taken, still moving
          break
        a, b = a - eta * ga, b - eta * gb
      u[:, j], v[:, j], steps[j] = a, b, t
  return u, v, steps, status


def _starts(d, n, seed=0):
  rng = np.random.default_rng(seed)
  u, v = rng.normal(size=(2, d, n)).astype(np.float32)
  u[:, :6] *= 10  # far out: these blow up
  return u, v


def test_kernel_matches_numpy_gd_loop():
  u, v = _starts(3, 40)  # d = 3 padded to 4; 40 starts in two blocks of 32
  args = (1.0, 0.1, 0.1, 1e-4, 1e8)
  ker = [np.asarray(x) for x in gd_grid_pallas(jnp.asarray(u), jnp.asarray(v), *args,
                                               max_steps=300, block=32, interpret=True)]
  want = _np_gd(u, v, *args, max_steps=300)
  np.testing.assert_array_equal(ker[3], want[3])
  np.testing.assert_array_equal(ker[2], want[2])
  conv, div = want[3] == CONVERGED, want[3] == DIVERGED
  assert conv.sum() >= 20 and div.sum() >= 4
  for k, w in zip(ker[:2], want[:2], strict=True):  # a compiler's FMA may differ in the last bit
    np.testing.assert_allclose(k[:, conv], w[:, conv], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(k[:, div], w[:, div], rtol=1e-4)
  # At a converged point the gradient 2 (r v + lam u), 2 (r u + lam v) is below tol.
  cu, cv = ker[0][:, conv], ker[1][:, conv]
  r = np.sum(cu * cv, axis=0) - 1.0
  grad = np.concatenate([2 * (r * cv + 0.1 * cu), 2 * (r * cu + 0.1 * cv)])
  assert np.all(np.linalg.norm(grad, axis=0) < 1e-4 * 1.01)


def test_running_start_stops_after_max_steps_steps():
  u = np.array([[1e-3]], np.float32)  # near the saddle at the origin: slow to leave
  args = (1.0, 0.0, 1e-4, 1e-6, 1e8)
  ker = gd_grid_pallas(jnp.asarray(u), jnp.asarray(u), *args, max_steps=50, block=32,
                       interpret=True)
  want = _np_gd(u, u, *args, max_steps=50)
  assert int(ker[3][0]) == int(want[3][0]) == 0 and int(ker[2][0]) == want[2][0] == 50
  np.testing.assert_allclose(ker[0], want[0], rtol=1e-6)


def test_tpu_layout_matches_numpy_without_races():
  # The TPU layout (scalars in SMEM, blocks widened to 128 starts) in the TPU interpreter,
  # two simulated cores splitting the "parallel" start blocks.
  u, v = _starts(3, 200, seed=1)  # 200 starts: 2 blocks of 128, the last one padded
  args = (1.0, 0.1, 0.1, 1e-4, 1e8)
  params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
  ker = [np.asarray(x) for x in gd_grid_pallas(jnp.asarray(u), jnp.asarray(v), *args,
                                               max_steps=300, block=32, interpret=params)]
  assert not tpu_interpret.races.races_found
  want = _np_gd(u, v, *args, max_steps=300)
  np.testing.assert_array_equal(ker[3], want[3])
  np.testing.assert_array_equal(ker[2], want[2])
  assert (want[3] == CONVERGED).sum() >= 100 and (want[3] == DIVERGED).sum() >= 4
  for k, w in zip(ker[:2], want[:2], strict=True):
    np.testing.assert_allclose(k, w, rtol=1e-4, atol=1e-6)


def test_bad_arguments_raise():
  u = jnp.zeros((2, 8))
  with pytest.raises(TypeError, match="share a float dtype"):
    gd_grid_pallas(u, u.astype(jnp.int32), 1.0, 0.0, 0.1, 1e-6, 1e8, max_steps=5)
  with pytest.raises(TypeError, match="interpret must be a bool or a pltpu.InterpretParams"):
    gd_grid_pallas(u, u, 1.0, 0.0, 0.1, 1e-6, 1e8, max_steps=5, interpret=1)
