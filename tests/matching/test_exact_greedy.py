"""Exact and greedy incremental matching against scipy's optimum."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from jaxlab import matching as M
from jaxlab.matching.state import distance_row, first_argmin, first_index


def _instance(seed, n, dim=2):
  rng = np.random.default_rng(seed)
  return rng.random((n, dim)).astype(np.float32), rng.random((n, dim)).astype(np.float32)


# One instance size for the tests that insert into 2-D states: their programs (a state's
# configuration and shapes fix them) compile once per algorithm and metric, not per test.
N = 16


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("metric", ["euclidean", "l1"])
def test_exact_is_optimal_after_every_insertion(seed, metric):
  servers, requests = _instance(seed, N)
  state = M.init(servers, algorithm="exact", metric=metric)
  for i, r in enumerate(requests):
    state = M.insert(state, r)
    M.check_invariants(state)
    opt = M.optimal_cost(requests[: i + 1], servers, metric)
    np.testing.assert_allclose(float(M.cost(state)), opt, rtol=1e-5, atol=1e-5)
  assert M.num_inserted(state) == len(requests)


def test_exact_on_non_metric_precomputed_costs_with_fewer_requests():
  rng = np.random.default_rng(3)
  costs = rng.random((30, 15)) ** 3 * 10  # not a metric; 30 possible requests, 15 servers
  rows = rng.permutation(30)[:10]
  state = M.init(costs, algorithm="exact", metric="precomputed", capacity=10)
  for k, r in enumerate(rows):
    state = M.insert(state, int(r))
    M.check_invariants(state)
    opt = M.optimal_cost(rows[: k + 1], costs, "precomputed")
    np.testing.assert_allclose(float(M.cost(state)), opt, rtol=1e-5)
  # The assignment is one optimal assignment: its cost equals scipy's.
  a = M.assignment(state)
  np.testing.assert_allclose(costs[rows, a].sum(), M.optimal_cost(rows, costs, "precomputed"),
                             rtol=1e-5)


def test_precomputed_and_coordinates_agree():
  servers, requests = _instance(7, N)
  d = M.cost_matrix(np.concatenate([requests, servers]), servers, "euclidean")
  a = M.init(servers, algorithm="exact")
  b = M.init(d, algorithm="exact", metric="precomputed")
  for i in range(N):
    a = M.insert(a, requests[i])
    b = M.insert(b, i)
  np.testing.assert_allclose(float(M.cost(a)), float(M.cost(b)), rtol=1e-5)


@pytest.mark.parametrize("algorithm", ["exact", "greedy"])
def test_batch_equals_one_by_one(algorithm):
  servers, requests = _instance(11, N)
  one = M.init(servers, algorithm=algorithm)
  for r in requests:
    one = M.insert(one, r)
  batch = M.insert_batch(M.insert_batch(M.init(servers, algorithm=algorithm), requests[:N // 2]),
                         requests[N // 2:])
  M.check_invariants(batch)
  np.testing.assert_array_equal(M.assignment(one), M.assignment(batch))


def test_greedy_takes_nearest_free_server_and_is_valid():
  servers = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]], np.float32)
  state = M.init(servers, algorithm="greedy")
  state = M.insert(state, np.array([0.9, 0.0]))  # nearest: server 1
  state = M.insert(state, np.array([1.1, 0.0]))  # server 1 taken: nearest free is 0 (1.1 < 1.9)
  np.testing.assert_array_equal(M.assignment(state), [1, 0])
  np.testing.assert_allclose(float(M.cost(state)), 0.1 + 1.1, rtol=1e-6)
  for seed in range(3):
    servers, requests = _instance(seed, N)
    state = M.init(servers, algorithm="greedy")
    for half in (requests[:N // 2], requests[N // 2:]):
      state = M.insert_batch(state, half)
    M.check_invariants(state)
    assert float(M.cost(state)) >= M.optimal_cost(requests, servers) - 1e-4


def test_insert_compiles_once():
  servers, requests = _instance(0, N)
  state = M.init(servers, algorithm="exact")
  state = M.insert(state, requests[0])
  from jaxlab.matching import api

  # The library's jitted insert, re-jitted with a trace counter: one trace serves every
  # insertion (the state's structure, shapes and dtypes do not drift as rows fill up).
  chex.clear_trace_counter()
  insert = jax.jit(chex.assert_max_traces(api._insert.__wrapped__, n=1))
  for r in requests[1:]:
    state = insert(state, jnp.asarray(r))
  M.check_invariants(state)
  assert int(state.count) == len(requests)


def test_bad_input():
  servers, requests = _instance(0, 4)
  with pytest.raises(ValueError, match="algorithm"):
    M.init(servers, algorithm="hungarian")
  with pytest.raises(ValueError, match="metric"):
    M.init(servers, metric="cosine")
  with pytest.raises(ValueError, match="capacity"):
    M.init(servers, capacity=5)
  with pytest.raises(ValueError, match="options"):
    M.init(servers, algorithm="exact", eps=0.1)
  with pytest.raises(ValueError, match="non-negative"):
    M.init(-np.ones((3, 3)), algorithm="exact", metric="precomputed")
  state = M.init(servers, algorithm="exact", capacity=2)
  with pytest.raises(ValueError, match="shape"):
    M.insert(state, np.zeros(3))
  with pytest.raises(ValueError, match="finite"):
    M.insert(state, np.array([np.nan, 0.0]))
  state = M.insert_batch(state, requests[:2])
  with pytest.raises(ValueError, match="capacity"):
    M.insert(state, requests[2])
  pre = M.init(np.ones((5, 3)), algorithm="exact", metric="precomputed")
  with pytest.raises(ValueError, match="row index"):
    M.insert(pre, 7)
  with pytest.raises(ValueError, match="rows"):
    M.optimal_assignment(np.ones((4, 3)))
  assert M.optimal_cost(np.zeros((0, 2)), servers) == 0.0
  jax.block_until_ready(state.count)


@pytest.mark.parametrize("metric", ["euclidean", "l1"])
def test_numpy_anchor_is_optimal_and_agrees_with_jax(metric):
  servers, requests = _instance(5, 40)
  a = M.incremental_exact_numpy(requests, servers, metric)
  c = M.cost_matrix(requests, servers, metric)
  assert len(set(a.tolist())) == 40
  np.testing.assert_allclose(c[np.arange(40), a].sum(), M.optimal_cost(requests, servers, metric),
                             rtol=1e-9)
  state = M.insert_many(M.init(servers, algorithm="exact", metric=metric), requests)
  np.testing.assert_allclose(float(M.cost(state)), c[np.arange(40), a].sum(), rtol=1e-5)


@pytest.mark.parametrize("algorithm", ["exact", "greedy", "push_relabel"])
def test_inside_user_jit_past_capacity_is_rejected_not_corrupted(algorithm):
  servers, requests = _instance(0, 3)
  state = M.init(servers, algorithm=algorithm, capacity=2)
  step = jax.jit(M.insert)
  for r in requests:
    state = step(state, r)
  assert M.num_inserted(state) == 2 and bool(state.rejected)
  assert sorted(np.asarray(state.request_of).tolist()) == [-1, 0, 1]
  with pytest.raises(AssertionError, match="rejected"):
    M.check_invariants(state)


def test_insertions_inside_a_callers_trace():
  """insert / insert_many / insert_batch called inside a caller's jit or scan, with traced or
  closed-over arguments, are traced into the caller's program (JAX takes compiler options on
  the outermost jit only, and ours set some): the states of the eager calls."""
  servers, requests = _instance(11, N)
  state = M.init(servers, algorithm="greedy")
  half = jnp.asarray(requests[:N // 2])  # a device array: closed over, it stays concrete
  want = M.insert_many(state, half)
  scanned, _ = jax.lax.scan(lambda s, r: (M.insert(s, r), None), state, half)
  got = [jax.jit(M.insert_many)(state, half), jax.jit(lambda: M.insert_many(state, half))(),
         jax.jit(M.insert_batch)(state, half), jax.jit(lambda: M.insert_batch(state, half))(),
         scanned, M.insert_batch(state, half)]
  for g in got:
    assert M.num_inserted(g) == N // 2
    np.testing.assert_array_equal(M.assignment(g), M.assignment(want))
  one = jax.jit(lambda: M.insert(state, half[0]))()
  np.testing.assert_array_equal(M.assignment(one), M.assignment(M.insert(state, half[0])))


def test_float32_overflow_is_rejected():
  servers, _ = _instance(0, 3)
  with pytest.raises(ValueError, match="finite"):
    M.insert(M.init(servers, algorithm="exact"), np.array([1e39, 0.0]))


@pytest.mark.parametrize("size", [1, 7, 300])
def test_first_index_and_argmin_match_numpy(size):
  rng = np.random.default_rng(size)
  x = rng.integers(0, 4, size).astype(np.float32)  # ties on purpose
  x[rng.random(size) < 0.3] = np.inf
  assert int(first_argmin(jnp.asarray(x))) == int(np.argmin(x))
  for mask in (x == 0, np.zeros(size, bool), np.ones(size, bool)):
    assert int(first_index(jnp.asarray(mask))) == int(np.argmax(mask))


@pytest.mark.parametrize("dim", [1, 2, 16, 17, 64])  # both sides of the unrolled form
@pytest.mark.parametrize("metric", ["euclidean", "l1"])
def test_distance_row_matches_scipy(dim, metric):
  servers, requests = _instance(dim, 40, dim)
  state = M.init(servers, metric=metric, algorithm="greedy")
  want = cdist(requests[:3], servers, "euclidean" if metric == "euclidean" else "cityblock")
  for i in range(3):
    np.testing.assert_allclose(distance_row(state, jnp.asarray(requests[i])), want[i], rtol=1e-5)
