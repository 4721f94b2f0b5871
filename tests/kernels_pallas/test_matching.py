"""The push-relabel round kernel against its jnp reference (interpret mode)."""

import jax.numpy as jnp
import numpy as np
import pytest

from kernels_pallas.matching import round_proposals_pallas, round_proposals_reference


def _round_inputs(seed, g, n):
  rng = np.random.default_rng(seed)
  dist = jnp.asarray(rng.random((g, n)), jnp.float32)
  scale0 = jnp.float32(2 * n / 0.2 / 8)
  y_s = jnp.asarray(-rng.integers(0, 3, n), jnp.int32)
  base = jnp.ceil(dist * scale0).astype(jnp.int32)
  # Duals near the 1-feasibility boundary, so some edges are admissible (slack -1).
  y_r = jnp.asarray(jnp.min(base - y_s[None], axis=1) + 1 - rng.integers(0, 2, g), jnp.int32)
  eligible = jnp.asarray(rng.random(n) < 0.8)
  valid = jnp.asarray(rng.random(g) < 0.9)
  ids = jnp.arange(g, dtype=jnp.int32) + 7
  return dist, y_r, y_s, eligible, valid, ids, scale0


@pytest.mark.parametrize("level", [0, 1, 3])
@pytest.mark.parametrize("g,n,block_cols", [(13, 1000, 256), (8, 300, 128)])
def test_kernel_matches_reference(level, g, n, block_cols):
  dist, y_r, y_s, el, va, ids, scale0 = _round_inputs(level + n, g, n)
  words = (jnp.uint32(12345), jnp.uint32(4000000000))
  divs = (2.9, 3.0, 3.4)
  ref = round_proposals_reference(dist, y_r, y_s, el, va, ids, jnp.int32(level), scale0, words,
                                  divs)
  ker = round_proposals_pallas(dist, y_r, y_s, el, va, ids, jnp.int32(level), scale0, words,
                               divs, block_cols=block_cols, interpret=True)
  np.testing.assert_array_equal(ref[0], ker[0])
  np.testing.assert_array_equal(ref[1], ker[1])
  # Choices are admissible eligible servers of valid rows; -1 only when none exists.
  choice = np.asarray(ref[0])
  assert np.all(choice[~np.asarray(va)] == -1)


def test_reference_by_hand():
  # One row, three servers at distances 0.1, 0.2, 0.3; scale0 = 10 -> d_0 = 1, 2, 3.
  dist = jnp.array([[0.1, 0.2, 0.3]], jnp.float32)
  y_s = jnp.zeros(3, jnp.int32)
  y_r = jnp.array([2], jnp.int32)  # slack = d - 2 = -1, 0, 1: only server 0 admissible
  out = round_proposals_reference(dist, y_r, y_s, jnp.ones(3, bool), jnp.ones(1, bool),
                                  jnp.zeros(1, jnp.int32), jnp.int32(0), jnp.float32(10.0),
                                  (jnp.uint32(1), jnp.uint32(2)), (3.0,))
  assert int(out[0][0]) == 0 and int(out[1][0]) == -1
  # Server 0 not eligible: no admissible edge, min slack over the others is 0.
  out = round_proposals_reference(dist, y_r, y_s, jnp.array([False, True, True]),
                                  jnp.ones(1, bool), jnp.zeros(1, jnp.int32), jnp.int32(0),
                                  jnp.float32(10.0), (jnp.uint32(1), jnp.uint32(2)), (3.0,))
  assert int(out[0][0]) == -1 and int(out[1][0]) == 0
