"""The GD grid kernel against its jnp reference (interpret mode)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

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
