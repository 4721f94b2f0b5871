"""The push-relabel round kernel against its jnp reference and a NumPy loop (interpret mode).

``interpret=True`` runs the GPU variant (each program loops over the column
tiles); ``pltpu.InterpretParams`` runs the TPU variant (column tiles on a
sequential grid axis). Interpreters run the grid in order: they cannot show a
GPU race (``test_lowering.py`` checks that no Triton kernel revisits an output
block; the rest needs a GPU).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic.interpret import interpret_pallas_call as tpu_interpret  # races
from jax.experimental.pallas import tpu as pltpu

from kernels_pallas.matching import round_proposals_pallas, round_proposals_reference


def _round_inputs(seed, g, n):
  """Random inputs of a round, made in NumPy (eager jnp ops would each compile per shape)."""
  rng = np.random.default_rng(seed)
  dist = rng.random((g, n)).astype(np.float32)
  scale0 = np.float32(2 * n / 0.2 / 8)
  y_s = (-rng.integers(0, 3, n)).astype(np.int32)
  base = np.ceil(dist * scale0).astype(np.int32)
  # Duals near the 1-feasibility boundary, so some edges are admissible (slack -1).
  y_r = (np.min(base - y_s[None], axis=1) + 1 - rng.integers(0, 2, g)).astype(np.int32)
  eligible = rng.random(n) < 0.8
  valid = rng.random(g) < 0.9
  ids = np.arange(g, dtype=np.int32) + 7
  return (*(jnp.asarray(x) for x in (dist, y_r, y_s, eligible, valid, ids)),
          jnp.float32(scale0))


# The reference jitted (one program per shape; divisors static), as the rounds run it.
_reference = jax.jit(round_proposals_reference, static_argnums=9)


@pytest.mark.parametrize("level", [0, 1, 3])
@pytest.mark.parametrize("g,n,block_cols", [(13, 1000, 256), (8, 300, 128)])
def test_kernel_matches_reference(level, g, n, block_cols):
  dist, y_r, y_s, el, va, ids, scale0 = _round_inputs(level + n, g, n)
  words = (jnp.uint32(12345), jnp.uint32(4000000000))
  divs = (2.9, 3.0, 3.4)
  ref = _reference(dist, y_r, y_s, el, va, ids, jnp.int32(level), scale0, words, divs)
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
  out = _reference(dist, y_r, y_s, jnp.ones(3, bool), jnp.ones(1, bool), jnp.zeros(1, jnp.int32),
                   jnp.int32(0), jnp.float32(10.0), (jnp.uint32(1), jnp.uint32(2)), (3.0,))
  assert int(out[0][0]) == 0 and int(out[1][0]) == -1
  # Server 0 not eligible: no admissible edge, min slack over the others is 0.
  out = _reference(dist, y_r, y_s, jnp.array([False, True, True]), jnp.ones(1, bool),
                   jnp.zeros(1, jnp.int32), jnp.int32(0), jnp.float32(10.0),
                   (jnp.uint32(1), jnp.uint32(2)), (3.0,))
  assert int(out[0][0]) == -1 and int(out[1][0]) == 0


# -- against a NumPy brute force written from the paper's definitions ----------------------
def _np_lowbias32(x):
  x = x ^ (x >> np.uint32(16))
  x = x * np.uint32(0x7FEB352D)
  x = x ^ (x >> np.uint32(15))
  x = x * np.uint32(0x846CA68B)
  return x ^ (x >> np.uint32(16))


def _np_round(dist, y_r, y_s, eligible, valid, row_ids, level, scale0, words, divisors):
  """Per row, loop over servers: scaled cost, slack, admissible set, random-priority pick."""
  dist, y_r, y_s = np.asarray(dist), np.asarray(y_r), np.asarray(y_s)
  eligible, valid, row_ids = np.asarray(eligible), np.asarray(valid), np.asarray(row_ids)
  g, n = dist.shape
  k0, k1 = (np.uint32(w) for w in words)
  choice, min_slack = np.full(g, -1), np.full(g, 2**30)
  with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as intended
    for r in range(g):
      best = 0
      for s in range(n):
        if not (valid[r] and eligible[s]):
          continue
        cost = np.ceil(np.float32(dist[r, s]) * np.float32(scale0))  # d_0 = ceil(scale0 d)
        for i in range(level):  # d_i = ceil(d_{i-1} / c_{i-1})
          cost = np.ceil(cost / np.float32(divisors[i]))
        slack = int(cost) - int(y_r[r]) - int(y_s[s])
        min_slack[r] = min(min_slack[r], slack)
        if slack == -1:  # admissible; priority = hash of the edge's index, never 0
          idx = np.uint32(row_ids[r]) * np.uint32(n) + np.uint32(s)
          prio = _np_lowbias32(_np_lowbias32(idx * np.uint32(0x9E3779B9) + k0) ^ k1)
          prio |= np.uint32(1)
          if prio > best:
            best, choice[r] = prio, s
  return choice, min_slack


@pytest.mark.parametrize("level", [0, 2])
def test_kernel_matches_numpy_brute_force(level):
  g, n = 11, 300  # 2 row blocks, 3 column tiles of 128 (the last one padded)
  dist, y_r, y_s, el, va, ids, scale0 = _round_inputs(40 + level, g, n)
  words, divs = (jnp.uint32(777), jnp.uint32(3000000001)), (2.9, 3.0, 3.4)
  choice, slack = round_proposals_pallas(dist, y_r, y_s, el, va, ids, jnp.int32(level), scale0,
                                         words, divs, block_cols=128, interpret=True)
  want_choice, want_slack = _np_round(dist, y_r, y_s, el, va, ids, level, scale0,
                                      (777, 3000000001), divs)
  np.testing.assert_array_equal(slack, want_slack)
  np.testing.assert_array_equal(choice, want_choice)
  assert (want_choice >= 0).sum() >= 2 and (want_choice[np.asarray(va)] == -1).any()


def test_choice_is_uniform_over_admissible_servers():
  """Fresh key words per round: the pick spreads evenly over the admissible edges."""
  n = 8
  dist = jnp.full((1, n), 0.1, jnp.float32)  # scale0 = 10: every d_0 = 1
  y_r = jnp.array([2], jnp.int32)
  y_s = jnp.array([0, 0, 0, 0, -1, -1, -3, 0], jnp.int32)  # slack -1 at servers 0-3 and 7
  el = jnp.array([True] * 7 + [False])  # server 7 is not eligible: 4 admissible
  args = (dist, y_r, y_s, el, jnp.ones(1, bool), jnp.zeros(1, jnp.int32), jnp.int32(0),
          jnp.float32(10.0))
  picks = jax.jit(jax.vmap(lambda k0: round_proposals_reference(
      *args, (k0, jnp.uint32(9)), (3.0,))[0][0]))(jnp.arange(2000, dtype=jnp.uint32))
  counts = np.bincount(np.asarray(picks), minlength=n)
  assert counts[4:].sum() == 0 and counts.sum() == 2000
  assert np.all(np.abs(counts[:4] - 500) < 90)  # ~4.5 binomial sigmas
  one = round_proposals_pallas(*args, (jnp.uint32(5), jnp.uint32(9)), (3.0,), block_cols=128,
                               interpret=True)
  assert int(one[0][0]) in range(4) and int(one[1][0]) == -1


# -- the TPU variant (column tiles on a sequential grid axis) in the TPU interpreter -------
def test_tpu_variant_matches_numpy_without_races():
  """Two simulated cores split the "parallel" row blocks; column tiles run in order.

  The interpreter also shuffles the order of parallel grid points, so marking the
  column axis "parallel" would break the running results (and this test).
  """
  g, n, level = 13, 300, 1  # 2 row blocks, 3 column tiles of 128 (the last one padded)
  dist, y_r, y_s, el, va, ids, scale0 = _round_inputs(50, g, n)
  words, divs = (jnp.uint32(12345), jnp.uint32(4000000000)), (2.9, 3.0, 3.4)
  params = pltpu.InterpretParams(detect_races=True, num_cores_or_threads=2)
  choice, slack = round_proposals_pallas(dist, y_r, y_s, el, va, ids, jnp.int32(level), scale0,
                                         words, divs, block_cols=128, interpret=params)
  assert not tpu_interpret.races.races_found
  want_choice, want_slack = _np_round(dist, y_r, y_s, el, va, ids, level, scale0,
                                      (12345, 4000000000), divs)
  np.testing.assert_array_equal(slack, want_slack)
  np.testing.assert_array_equal(choice, want_choice)
  assert (want_choice >= 0).sum() >= 2


def test_bad_arguments_raise_before_tracing():
  dist, y_r, y_s, el, va, ids, scale0 = _round_inputs(0, 4, 16)
  args = (dist, y_r, y_s, el, va, ids, jnp.int32(0), scale0, (jnp.uint32(1), jnp.uint32(2)),
          (3.0,))
  with pytest.raises(ValueError, match="block_cols must be a power of two >= 128"):
    round_proposals_pallas(*args, block_cols=100, interpret=True)
  with pytest.raises(ValueError, match="block_rows must be a power of two >= 8"):
    round_proposals_pallas(*args, block_rows=4, interpret=True)
  with pytest.raises(ValueError, match=r"y_s must have shape \(16,\)"):
    round_proposals_pallas(*args[:2], y_s[:3], *args[3:], interpret=True)
  with pytest.raises(TypeError, match="interpret must be a bool or a pltpu.InterpretParams"):
    round_proposals_pallas(*args, interpret="yes")
