"""The bad-input probe (issue 16): bad or edge input in, the named error out.

Or, for traced input that cannot raise, a flagged and non-silent result.

Each case was once silent (a wrong result), a hang, or an obscure late error.
Inputs are tiny, so the module runs in seconds; add a case here for every new
method's bad inputs, so that the count of silent results stays at zero.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import matching as M

# --- matching: finite coordinates whose distances overflow float32 ------------------------------

_SERVERS = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_rejects_overflowing_coordinates(algorithm):
  with pytest.raises(ValueError, match="servers coordinates are too large"):
    M.init(_SERVERS * 1e30, algorithm=algorithm)
  state = M.init(_SERVERS, algorithm=algorithm)
  with pytest.raises(ValueError, match="request coordinates are too large"):
    M.insert(state, np.array([1e30, 0.0]))
  with pytest.raises(ValueError, match="requests coordinates are too large"):
    M.insert_batch(state, np.array([[0.5, 0.5], [1e30, 0.0]]))
  with pytest.raises(ValueError, match="too large"):
    M.init(np.full((2, 3), 1e38, np.float32), algorithm=algorithm, metric="precomputed")


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_traced_overflow_is_rejected_not_assigned(algorithm):
  state = M.init(_SERVERS, algorithm=algorithm)
  state = M.insert(state, np.array([0.1, 0.0]))
  out = jax.jit(M.insert)(state, jnp.array([1e30, 0.0]))
  assert bool(out.rejected) and int(out.count) == 1
  np.testing.assert_array_equal(out.server_of, state.server_of)


def _stored(state, coords):
  return state.replace(requests=state.requests.at[state.count].set(jnp.asarray(coords)))


def test_matching_exact_loop_ends_on_a_non_finite_row():
  # Bypasses the checks: the augmenting-path loop itself must end (it spun
  # forever once every reachable server was taken) and flag the insertion.
  from jaxlab.matching.exact import insert_exact

  state = M.init(_SERVERS, algorithm="exact")
  state = M.insert_batch(state, np.array([[0.0, 0.0], [1.0, 0.0]]))
  out = jax.jit(insert_exact)(_stored(state, [1e30, 0.0]), state.count)
  assert bool(out.rejected) and int(out.count) == 2
  out = jax.jit(insert_exact)(_stored(state, [np.nan, 0.0]), state.count)
  assert bool(out.rejected) and int(out.count) == 2


def test_matching_greedy_never_double_books_on_a_non_finite_row():
  from jaxlab.matching.greedy import insert_greedy

  state = M.insert(M.init(_SERVERS, algorithm="greedy"), np.array([0.0, 0.0]))  # takes server 0
  for bad in ([1e30, 0.0], [np.nan, 0.0]):
    out = jax.jit(insert_greedy)(_stored(state, bad), state.count)
    assert bool(out.rejected) and int(out.count) == 1
    np.testing.assert_array_equal(out.request_of, state.request_of)


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_matching_empty_batch_is_a_no_op(algorithm):
  state = M.init(_SERVERS, algorithm=algorithm)
  for fn in (M.insert_batch, M.insert_many):
    out = fn(state, np.zeros((0, 2), np.float32))
    assert int(out.count) == 0 and not bool(out.rejected)
