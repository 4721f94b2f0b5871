"""Cascadia against references: M/M/c closed forms (M/M/1, Erlang C, the mean sojourn time)
and a discrete-event simulation, the MILP against brute-force enumeration, the cascade
routing and the threshold search on hand-built cases, and bad input."""

import itertools
import math

import numpy as np
import pytest
from scipy import integrate

from jaxlab.inference import cascadia as ca

# --------------------------------------------------------------------------- queueing


@pytest.mark.parametrize("lam,mu", [(0.5, 1.0), (2.0, 2.5), (0.01, 3.0)])
def test_mm1_p95_is_ln20_over_gap(lam, mu):
  assert ca.mmc_p95(lam, mu, 1) == pytest.approx(math.log(20) / (mu - lam), rel=1e-9)
  t = np.linspace(0, 5, 11)
  np.testing.assert_allclose(ca.mmc_sojourn_sf(t, lam, mu, 1), np.exp(-(mu - lam) * t),
                             rtol=1e-12)


def _erlang_c_sum(c: int, a: float) -> float:
  top = a ** c / math.factorial(c) * c / (c - a)
  return top / (sum(a ** k / math.factorial(k) for k in range(c)) + top)


def test_erlang_c_against_the_sum_formula():
  assert ca.erlang_c(2, 1.0) == pytest.approx(1 / 3)  # by hand: (1/2 * 2) / (1 + 1 + 1)
  assert ca.erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: P(wait) = rho
  for c, a in [(2, 1.5), (3, 2.4), (5, 1.0), (8, 7.5), (20, 12.0)]:
    assert ca.erlang_c(c, a) == pytest.approx(_erlang_c_sum(c, a), rel=1e-10)


@pytest.mark.parametrize("c,lam,mu", [(2, 1.5, 1.0), (3, 2.0, 1.0), (4, 1.0, 2.0), (3, 0.4, 0.5)])
def test_mmc_mean_sojourn_from_the_tail(c, lam, mu):
  """E[T] = integral of P(T > t) = C / (c mu - lambda) + 1 / mu; the p95 solves the tail.
  (3, 0.4, 0.5) has c mu - lambda > mu, (2, 1.5, 1.0) has it < mu, (4, 1, 2) ~ no wait."""
  mean = integrate.quad(lambda t: float(ca.mmc_sojourn_sf(t, lam, mu, c)), 0, np.inf)[0]
  expected = ca.erlang_c(c, lam / mu) / (c * mu - lam) + 1 / mu
  assert mean == pytest.approx(expected, rel=1e-7)
  p95 = ca.mmc_p95(lam, mu, c)
  assert float(ca.mmc_sojourn_sf(p95, lam, mu, c)) == pytest.approx(0.05, rel=1e-9)


def test_equal_rates_branch_is_continuous():
  # c mu - lambda = mu exactly (d = 0) against neighbours on either side
  mid = float(ca.mmc_sojourn_sf(2.0, 1.0, 1.0, 2))
  for lam in (1.0 - 1e-7, 1.0 + 1e-7):
    assert float(ca.mmc_sojourn_sf(2.0, lam, 1.0, 2)) == pytest.approx(mid, rel=1e-5)
  assert np.isfinite(ca.mmc_sojourn_sf(1e4, 1.9, 1.0, 2))  # tails stay finite (no overflow)


@pytest.mark.parametrize("c,lam,mu", [(1, 0.7, 1.0), (3, 2.4, 1.0), (4, 1.0, 0.5)])
def test_simulation_matches_the_closed_form(c, lam, mu):
  rng = np.random.default_rng(0)
  t = ca.simulate_mmc(rng, lam, mu, c, 60_000)[2_000:]  # drop the warm-up from empty
  assert np.quantile(t, 0.95) == pytest.approx(ca.mmc_p95(lam, mu, c), rel=0.06)
  for x in (0.5, 2.0, 5.0):
    assert np.mean(t > x) == pytest.approx(float(ca.mmc_sojourn_sf(x, lam, mu, c)), abs=0.02)


def test_fcfs_by_hand():
  # 2 servers: jobs at 0, 0, 0 with service 3, 1, 1 -> the third waits for the second
  np.testing.assert_allclose(ca.simulate_fcfs([0, 0, 0], [3, 1, 1], 2), [3, 1, 2])
  np.testing.assert_allclose(ca.simulate_fcfs([0, 5], [1, 1], 1), [1, 6])


def test_cascade_simulation_against_queueing_theory():
  rng = np.random.default_rng(1)
  n, lam = 80_000, 0.6
  # one stage with 2 replicas of 2 workers (alpha 0.5): an M/M/2 with mu = sqrt(2) / s
  t = ca.simulate_cascade(rng, lam, np.zeros(n, int), [1.5, 1.0], [2, 0], [2, 0], alpha=0.5)
  assert np.quantile(t[2000:], 0.95) == pytest.approx(
      ca.mmc_p95(lam, np.sqrt(2) / 1.5, 2), rel=0.05)
  # every request through two M/M/1 stages: by Burke's and Reich's theorems the sojourns are
  # independent Exp(mu_1 - lam) + Exp(mu_2 - lam), whose tail is the M/M/c tail's formula
  t = ca.simulate_cascade(rng, lam, np.ones(n, int), [1.0, 0.8], [1, 1], [1, 1])[2000:]
  a, b = 1.0 - lam, 1 / 0.8 - lam
  tail = lambda x: (b * np.exp(-a * x) - a * np.exp(-b * x)) / (b - a)  # noqa: E731
  for x in (1.0, 4.0, 8.0):
    assert np.mean(t > x) == pytest.approx(tail(x), abs=0.015)


def test_unstable_queues_are_infinite():
  assert ca.mmc_p95(2.0, 1.0, 2) == math.inf and ca.mmc_p95(3.0, 1.0, 2) == math.inf
  assert np.all(ca.mmc_sojourn_sf([0.0, 10.0], 3.0, 1.0, 2) == 1.0)
  tab = ca.latency_table(1.5, [1.0, 0.0], [1.0, 5.0], 3, alpha=0.5)
  assert tab.latency[0, 0] == math.inf and tab.latency[0, 1] == math.inf  # 1 worker: rho 1.5
  assert np.isfinite(tab.latency[0, 2]) and np.all(tab.latency[1] == 0)  # no traffic: 0


def test_latency_table_picks_the_best_strategy():
  s, n, alpha = [2.0], 6, 0.6
  low = ca.latency_table(0.05, [1.0], s, n, alpha=alpha)
  high = ca.latency_table(2.5, [1.0], s, n, alpha=alpha)
  for tab, rate in ((low, 0.05), (high, 2.5)):
    lat = tab.latency[0]
    assert np.all(np.diff(lat[np.isfinite(lat)]) <= 1e-12)  # more workers never hurt
    for f in range(1, n + 1):
      every = [ca.mmc_p95(rate, t ** alpha / s[0], f // t) for t in range(1, f + 1)]
      assert lat[f] == pytest.approx(min(every), rel=1e-12)
      d, t = tab.replicas[0, f], tab.tp[0, f]
      if np.isfinite(lat[f]):
        assert d * t <= f and lat[f] == pytest.approx(ca.mmc_p95(rate, t ** alpha / s[0], d))
  # light load: one tensor-parallel replica is fastest; heavy load: data-parallel replicas
  assert (low.replicas[0, n], low.tp[0, n]) == (1, n)
  assert high.replicas[0, n] > 1


# --------------------------------------------------------------------------- allocation


def _random_table(rng, models: int, n: int) -> np.ndarray:
  rows = []
  for _ in range(models):
    row = np.sort(rng.uniform(0.1, 10.0, n + 1))[::-1].copy()
    row[: rng.integers(0, 3)] = np.inf  # too few workers: unstable
    rows.append(row)
  return np.stack(rows)


@pytest.mark.parametrize("seed", range(8))
def test_milp_matches_brute_force(seed):
  rng = np.random.default_rng(seed)
  models, n = int(rng.integers(2, 5)), int(rng.integers(3, 8))
  table = _random_table(rng, models, n)
  milp, brute = ca.allocate(table, n), ca.allocate_brute_force(table, n)
  assert milp.latency == pytest.approx(brute.latency, rel=1e-9)
  if brute.workers is None:
    assert milp.workers is None
  else:
    assert sum(milp.workers) == n
    assert max(table[i, f] for i, f in enumerate(milp.workers)) == pytest.approx(milp.latency)


def test_milp_on_simulated_tables_and_by_hand():
  # by hand: a slow model 2 needs most workers; (1, 3) gives max(4, 3) = 4, (2, 2) max(2, 6)
  table = np.array([[np.inf, 4.0, 2.0, 1.5, 1.0], [np.inf, 20.0, 6.0, 3.0, 2.5]])
  assert ca.allocate(table, 4) == ca.Allocation((1, 3), 4.0)
  for rate in (0.5, 2.0, 6.0):
    tab = ca.latency_table(rate, [1.0, 0.4, 0.1], [0.2, 1.0, 5.0], 7).latency
    assert ca.allocate(tab, 7).latency == pytest.approx(ca.allocate_brute_force(tab, 7).latency)


def test_milp_infeasible_gives_inf():
  table = np.array([[np.inf, np.inf, 1.0], [np.inf, np.inf, 1.0]])  # each needs 2 of 2
  assert ca.allocate(table, 2) == ca.Allocation(None, math.inf)
  assert ca.allocate_brute_force(table, 2) == ca.Allocation(None, math.inf)
  assert ca.allocate(np.full((2, 3), np.inf), 2).workers is None


def test_uniform_and_proportional_allocations():
  table = np.tile(np.array([np.inf, 5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.4, 0.3]), (3, 1))
  assert ca.uniform_allocation(table, 8).workers == (3, 3, 2)
  # loads 1 : 2 : 5 over 8 workers: one each, then 5 more as quotas 0.625, 1.25, 3.125:
  # floors 0, 1, 3 and the last worker to the largest remainder (0.625, model 1)
  assert ca.proportional_allocation(table, 8, [1.0, 2.0, 5.0]).workers == (2, 2, 4)
  assert ca.proportional_allocation(table, 8, [1.0, 0.0, 1.0]).workers == (4, 0, 4)
  assert ca.proportional_allocation(table[:, :3], 2, [1.0, 1.0, 1.0]).latency == math.inf


# --------------------------------------------------------------------------- cascade


def test_routing_workloads_and_quality_by_hand():
  scores = np.array([[0.95, 0.5, 0.2],    # accepted at stage 1
                     [0.60, 0.97, 0.3],   # forwarded, accepted at stage 2
                     [0.60, 0.70, 0.4],   # forwarded twice: the largest answers
                     [0.90, 0.99, 0.9]])  # exactly at h_1 = 0.9: accepted
  h = [0.9, 0.95]
  np.testing.assert_array_equal(ca.cascade_route(scores, h), [0, 1, 2, 0])
  np.testing.assert_allclose(ca.workloads(scores, h), [1.0, 0.5, 0.25])
  correct = np.array([[1, 0, 0], [0, 1, 1], [1, 1, 0], [0, 1, 1]], bool)
  assert ca.cascade_quality(correct, scores, h) == pytest.approx(0.5)  # 1, 1, 0, 0
  np.testing.assert_allclose(ca.workloads(scores, [0.0, 0.0]), [1, 0, 0])  # all accepted
  np.testing.assert_array_equal(ca.cascade_route(scores, [1.0, 1.0]), [2, 2, 2, 2])


def test_chebyshev_objective():
  assert ca.chebyshev_objective(3.0, 0.9, 0.8, 0.95, 0.75, 10.0) == 3.0  # above the floor
  assert ca.chebyshev_objective(3.0, 0.7, 0.8, 0.95, 0.75, 10.0) == pytest.approx(3.0 + 5.0)
  assert ca.chebyshev_objective(math.inf, 0.9, 0.8, 0.95, 0.75, 10.0) == math.inf


def test_search_finds_the_grid_optimum_and_stops():
  grid = np.linspace(0, 1, 11)
  calls = []

  def evaluate(theta):  # separable: L at its least at (0.3, 0.7); quality falls with h_1
    calls.append(theta)
    return (theta[0] - 0.3) ** 2 + (theta[1] - 0.7) ** 2 + 1.0, 1.0 - 0.1 * (1 - theta[0])

  res = ca.search_thresholds(evaluate, 2, grid, q_min=0.0, z1=1.0, z2=0.9, mu=5.0, patience=2)
  assert res.thresholds == pytest.approx((0.3, 0.7)) and res.latency == pytest.approx(1.0)
  assert res.rounds == 3 and len(res.history) == 3  # one round moves, two stable rounds
  assert res.evaluations == len(calls) == len(set(calls))  # memoized
  # the same by exhaustive search over the grid
  brute = min(itertools.product(grid, grid), key=lambda t: evaluate(t)[0])
  assert res.thresholds == pytest.approx(brute)
  # with a floor the penalty moves h_1 up to meet it: Q >= 0.97 needs h_1 >= 0.7
  floor = ca.search_thresholds(evaluate, 2, grid, q_min=0.97, z1=1.0, z2=0.9, mu=100.0)
  assert floor.thresholds[0] == pytest.approx(0.7) and floor.quality >= 0.97 - 1e-12
  assert np.all(np.diff(floor.history) <= 0)


def test_coordinate_search_is_local_and_starts_fix_it():
  # L on the grid {0, 0.5, 1}^2: from (1, 1) the h_1 sweep moves to (0, 1) (5), where no
  # single threshold helps; the optimum (0.5, 0.5) needs both to move
  table = {(1.0, 1.0): 10.0, (0.0, 1.0): 5.0, (0.5, 1.0): 8.0, (0.0, 0.0): 6.0, (0.0, 0.5): 7.0,
           (1.0, 0.0): 9.0, (1.0, 0.5): 9.0, (0.5, 0.0): 9.0, (0.5, 0.5): 1.0}
  evaluate = lambda th: (table[tuple(th)], 1.0)  # noqa: E731
  grid = [0.0, 0.5, 1.0]
  kw = dict(q_min=0.5, z1=1.0, z2=0.5, mu=1.0)
  stuck = ca.search_thresholds(evaluate, 2, grid, **kw)
  assert stuck.thresholds == (0.0, 1.0) and stuck.objective == 5.0
  found = ca.search_thresholds(evaluate, 2, grid, starts=list(itertools.product(grid, grid)),
                               **kw)
  assert found.thresholds == (0.5, 0.5) and found.objective == 1.0
  with pytest.raises(ValueError, match="thresholds must be in"):
    ca.search_thresholds(evaluate, 2, grid, starts=[(0.5, 2.0)], **kw)


def test_max_feasible_rate_by_bisection():
  assert ca.max_feasible_rate(lambda r: r <= 3.7, 0.1, 100.0, 40) == pytest.approx(3.7, rel=1e-6)
  assert ca.max_feasible_rate(lambda r: True, 0.1, 100.0) == 100.0
  assert ca.max_feasible_rate(lambda r: False, 0.1, 100.0) == 0.0


# --------------------------------------------------------------------------- bad input


def test_bad_input_names_the_argument():
  scores = np.full((4, 3), 0.5)
  with pytest.raises(ValueError, match="thresholds must be in"):
    ca.workloads(scores, [0.5, 1.5])
  with pytest.raises(ValueError, match="thresholds must have num_models - 1 = 2"):
    ca.workloads(scores, [0.5])
  with pytest.raises(ValueError, match="scores"):
    ca.workloads(scores + 1, [0.5, 0.5])
  with pytest.raises(ValueError, match="num_workers must be a positive int"):
    ca.allocate(np.ones((2, 1)), 0)
  with pytest.raises(ValueError, match="num_workers must be a positive int"):
    ca.latency_table(1.0, [1.0], [1.0], -2)
  with pytest.raises(ValueError, match="non-increasing"):
    ca.allocate(np.array([[np.inf, 1.0, 2.0]]), 2)
  with pytest.raises(ValueError, match="table must be"):
    ca.allocate(np.ones((2, 4)), 2)
  with pytest.raises(ValueError, match="alpha"):
    ca.latency_table(1.0, [1.0], [1.0], 2, alpha=1.5)
  with pytest.raises(ValueError, match="service_times"):
    ca.latency_table(1.0, [1.0, 0.5], [1.0, 0.0], 2)
  with pytest.raises(ValueError, match="workload"):
    ca.latency_table(1.0, [1.2], [1.0], 2)
  with pytest.raises(ValueError, match="rate"):
    ca.mmc_p95(-1.0, 1.0, 1)
  with pytest.raises(TypeError, match="rate"):
    ca.mmc_p95("1", 1.0, 1)
  with pytest.raises(ValueError, match="servers"):
    ca.mmc_p95(0.5, 1.0, 0)
  with pytest.raises(ValueError, match="offered_load"):
    ca.erlang_c(2, 2.0)
  with pytest.raises(ValueError, match="grid"):
    ca.search_thresholds(lambda t: (1.0, 1.0), 2, [0.5, 2.0], q_min=0.5, z1=1.0, z2=0.5, mu=1.0)
  with pytest.raises(ValueError, match="z1"):
    ca.chebyshev_objective(1.0, 0.5, 0.5, 0.5, 0.5, 1.0)
  with pytest.raises(TypeError, match="rng"):
    ca.simulate_mmc(0, 1.0, 2.0, 1, 10)
  with pytest.raises(ValueError, match="replicas and tp must be >= 1"):
    ca.simulate_cascade(np.random.default_rng(0), 1.0, [0, 1], [1.0, 2.0], [1, 0], [1, 1])
  with pytest.raises(ValueError, match="load"):
    ca.proportional_allocation(np.ones((2, 3)), 2, [1.0])
