"""Cascadia: cascade thresholds and the workers each model of the cascade gets.

A cascade serves every request with the smallest model ``c_1`` first; a judge scores the
answer and, at stage ``k``, the answer is accepted when the score is at least ``h_k`` and
forwarded to ``c_{k+1}`` otherwise (the last model answers whatever reaches it). The
thresholds ``theta = (h_1 .. h_{C-1})`` fix each model's workload ``w_i`` (the fraction of
requests that reach it, :func:`workloads`) and the cascade's quality ``Q(theta)``
(:func:`cascade_quality`). Cascadia chooses them by a bi-level search:

* inner (:func:`allocate`): given the workloads, split ``N`` workers over the models by a
  mixed-integer program (``scipy.optimize.milp``) over binaries ``x_{i,f}`` (model ``i``
  gets ``f`` workers) and ``L >= 0``::

      min L   s.t.   sum_f x_{i,f} = 1                     for every model i
                     sum_i sum_f f x_{i,f} = N              (every worker is used)
                     L >= sum_f l_i(f) x_{i,f}              for every model i

  where ``l_i(f)`` is model ``i``'s p95 latency with ``f`` workers at its arrival rate
  ``lambda w_i`` under the best parallelism strategy for ``f`` workers
  (:func:`latency_table`). The tables are non-increasing in ``f`` (the strategies for ``f``
  workers are among those for ``f + 1``), so ``= N`` and ``<= N`` have the same optimum;
  we keep the paper's ``= N``. :func:`allocate_brute_force` enumerates every allocation
  (the tests check the MILP against it).
* outer (:func:`search_thresholds`): coordinate search over a grid of thresholds on the
  Chebyshev objective ``J(theta) = L(theta) + mu max(0, (q_min - Q(theta)) / (z1* - z2*))``
  (``z1*``: the quality with every request sent to ``c_C``; ``z2*``: to ``c_1``), stopped
  when ``J`` has not changed for ``patience`` rounds.

The serving simulator: one worker serves model ``i`` in ``s_i`` (proportional to the
model's FLOPs per request in our experiment); ``f`` workers are run as ``d`` data-parallel
replicas of ``t`` workers each (``d t <= f``), a replica of ``t`` workers serving
``t**alpha`` times faster (``alpha < 1``: a sublinear, tensor-parallel-like speed-up).
Each model is an M/M/d queue (Poisson arrivals, exponential service, first come first
served) whose sojourn-time p95 is closed-form (:func:`mmc_sojourn_sf`, Erlang C;
M/M/1: ``ln(20) / (mu - lambda)``); :func:`simulate_mmc` is a discrete-event simulation
of the same queue to check it against, and :func:`simulate_cascade` simulates requests
through the whole cascade for their end-to-end latency. A queue with ``lambda >= d mu`` is
unstable: its latency is ``inf``, and the MILP never picks it.

What is the paper's and what is ours: the paper serves LLMs on GPUs, profiles each
strategy (data, tensor and pipeline parallel degrees) with a simulator fit to measured
latencies, and judges answers with an LLM judge; its code is not released. Ours: small
classifiers, a judge score of the maximum softmax probability, service times from
counted FLOPs, M/M/c queues in closed form, a ``t**alpha`` speed-up in place of profiled
tensor / pipeline parallelism, and the quality on held-out data. Everything here runs on
the host in numpy / scipy: the MILP has ``C (N + 1) + 1`` variables and the queueing math
is closed-form, so nothing is worth a JAX program or a kernel.

Example:
  >>> w = workloads(scores, [0.9, 0.95])           # scores: (requests, C) judge scores
  >>> table = latency_table(2.0, w, service_times, 8, alpha=0.7)
  >>> alloc = allocate(table.latency, 8)           # alloc.workers, alloc.latency

References:
  Youhe Jiang, Fangcheng Fu, Wanru Zhao, Stephan Rabanser, Jintao Zhang, Nicholas D. Lane,
  Binhang Yuan. "Cascadia: An Efficient Cascade Serving System for Large Language
  Models." arXiv:2506.04203, 2025.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
from scipy import optimize

__all__ = ["Allocation", "LatencyTable", "SearchResult", "allocate", "allocate_brute_force",
           "cascade_quality", "cascade_route", "chebyshev_objective", "erlang_c",
           "latency_table", "max_feasible_rate", "mmc_p95", "mmc_sojourn_sf",
           "proportional_allocation", "search_thresholds", "simulate_cascade", "simulate_fcfs",
           "simulate_mmc", "uniform_allocation",
           "workloads"]


# --------------------------------------------------------------------------- validation

def _positive_int(name: str, value) -> int:
  if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
    raise ValueError(f"{name} must be a positive int, got {value!r}")
  return int(value)


def _finite_number(name: str, value, *, low: float | None = None, high: float | None = None,
                   low_open: bool = False, high_open: bool = False) -> float:
  if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
    raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
  v = float(value)
  bad = (not math.isfinite(v) or (low is not None and (v <= low if low_open else v < low))
         or (high is not None and (v >= high if high_open else v > high)))
  if bad:
    lo = "-inf" if low is None else f"{low:g}"
    hi = "inf" if high is None else f"{high:g}"
    left = "(" if low_open or low is None else "["
    right = ")" if high_open or high is None else "]"
    rng = f"{left}{lo}, {hi}{right}"
    raise ValueError(f"{name} must be finite and in {rng}, got {value!r}")
  return v


def _scores(scores) -> np.ndarray:
  s = np.asarray(scores, dtype=np.float64)
  if s.ndim != 2 or s.shape[0] < 1 or s.shape[1] < 1:
    raise ValueError(f"scores must be a (requests, models) array, got shape {s.shape}")
  if not np.all(np.isfinite(s)) or s.min() < 0 or s.max() > 1:
    raise ValueError("scores must be judge scores in [0, 1]")
  return s


def _thresholds(thresholds, num_models: int) -> np.ndarray:
  h = np.asarray(thresholds, dtype=np.float64).reshape(-1) if np.ndim(thresholds) <= 1 else None
  if h is None or h.shape[0] != num_models - 1:
    raise ValueError(f"thresholds must have num_models - 1 = {num_models - 1} entries (one per "
                     f"stage but the last), got shape {np.shape(thresholds)}")
  if not np.all(np.isfinite(h)) or (h.size and (h.min() < 0 or h.max() > 1)):
    raise ValueError(f"thresholds must be in [0, 1], got {h.tolist()}")
  return h


# --------------------------------------------------------------------------- the cascade

def cascade_route(scores, thresholds) -> np.ndarray:
  """The stage that answers each request: the first ``k`` with ``score_k >= h_k``, else
  the last model.

  Args:
    scores: ``(requests, C)`` judge scores in ``[0, 1]``, model ``k``'s score in column ``k``
      (models ordered by size).
    thresholds: ``C - 1`` thresholds ``h_1 .. h_{C-1}`` in ``[0, 1]``.

  Returns:
    ``(requests,)`` int, the 0-based index of the answering model.
  """
  s = _scores(scores)
  h = _thresholds(thresholds, s.shape[1])
  accept = np.concatenate([s[:, :-1] >= h, np.ones((s.shape[0], 1), bool)], axis=1)
  return np.argmax(accept, axis=1)  # first True


def workloads(scores, thresholds) -> np.ndarray:
  """``w_i``: the fraction of requests that reach model ``i`` (``w_1 = 1``).

  A request answered at stage ``k`` has visited models ``1 .. k``.
  """
  stage = cascade_route(scores, thresholds)
  num_models = np.shape(scores)[1]
  return np.array([(stage >= i).mean() for i in range(num_models)])


def cascade_quality(correct, scores, thresholds) -> float:
  """``Q(theta)``: the fraction of requests whose answering model is correct.

  Args:
    correct: ``(requests, C)`` bool, whether model ``k`` answers request ``n`` correctly.
    scores, thresholds: as in :func:`cascade_route`.
  """
  c = np.asarray(correct)
  if c.shape != np.shape(scores):
    raise ValueError(f"correct must have the shape of scores {np.shape(scores)}, got {c.shape}")
  stage = cascade_route(scores, thresholds)
  return float(c[np.arange(c.shape[0]), stage].mean())


# --------------------------------------------------------------------------- queueing

def erlang_c(servers: int, offered_load: float) -> float:
  """Erlang C: the probability that an arrival to an M/M/c queue waits.

  ``offered_load`` is ``a = lambda / mu``; needs ``a < c``. Computed by the stable Erlang B
  recursion ``B_k = a B_{k-1} / (k + a B_{k-1})``, then ``C = c B / (c - a (1 - B))``.
  """
  c = _positive_int("servers", servers)
  a = _finite_number("offered_load", offered_load, low=0)
  if a >= c:
    raise ValueError(f"offered_load must be < servers (a stable queue), got {a} >= {c}")
  b = 1.0
  for k in range(1, c + 1):
    b = a * b / (k + a * b)
  return c * b / (c - a * (1 - b))


def mmc_sojourn_sf(t, rate: float, service_rate: float, servers: int) -> np.ndarray:
  """``P(T > t)`` for the sojourn time ``T`` (wait + service) of an FCFS M/M/c queue.

  The wait is 0 with probability ``1 - C`` and ``Exp(c mu - lambda)`` with probability
  ``C`` (Erlang C), independent of the arrival's own ``Exp(mu)`` service, so with
  ``theta = c mu - lambda`` and ``d = theta - mu``::

      P(T > t) = (1 - C) e^{-mu t} + C e^{-mu t} (1 + mu (1 - e^{-d t}) / d)

  (the last factor is ``1 + mu t`` at ``d = 0``). For ``c = 1`` this is
  ``e^{-(mu - lambda) t}``. Unstable queues (``lambda >= c mu``) give 1.
  """
  lam = _finite_number("rate", rate, low=0)
  mu = _finite_number("service_rate", service_rate, low=0, low_open=True)
  c = _positive_int("servers", servers)
  t = np.asarray(t, dtype=np.float64)
  if lam >= c * mu:
    return np.ones_like(t)
  wait = erlang_c(c, lam / mu)
  theta = c * mu - lam
  d = abs(theta - mu)
  # e^{-mu t} (1 - e^{-d t}) / d = (e^{-mu t} - e^{-theta t}) / (theta - mu), written as
  # e^{-min(mu, theta) t} (1 - e^{-|d| t}) / |d| (no overflow, and t e^{-mu t} at d = 0)
  gap = t if d == 0 else -np.expm1(-d * t) / d
  return np.exp(-mu * t) + wait * mu * np.exp(-min(mu, theta) * t) * gap


def mmc_p95(rate: float, service_rate: float, servers: int, percentile: float = 0.95) -> float:
  """The ``percentile`` quantile of an M/M/c queue's sojourn time (``inf`` if unstable).

  Solves ``P(T > t) = 1 - percentile`` by Brent's method on :func:`mmc_sojourn_sf`.
  M/M/1 at 0.95: ``ln(20) / (mu - lambda)``.
  """
  lam = _finite_number("rate", rate, low=0)
  mu = _finite_number("service_rate", service_rate, low=0, low_open=True)
  c = _positive_int("servers", servers)
  p = _finite_number("percentile", percentile, low=0, high=1, low_open=True, high_open=True)
  if lam >= c * mu:
    return math.inf
  tail = 1 - p
  f = lambda t: float(mmc_sojourn_sf(t, lam, mu, c)) - tail  # noqa: E731
  hi = -math.log(tail) / mu
  while f(hi) > 0:
    hi *= 2
  return float(optimize.brentq(f, 0.0, hi, xtol=1e-12 * hi, rtol=1e-12))


def simulate_fcfs(arrivals, service, servers: int) -> np.ndarray:
  """Departure times of jobs through ``servers`` identical FCFS servers.

  Each job, in arrival order, takes the server that frees first: it starts at
  ``max(arrival, that server's free time)`` and leaves ``service`` later.

  Args:
    arrivals: ``(n,)`` non-decreasing arrival times.
    service: ``(n,)`` non-negative service times, one per job.
    servers: the number of servers.

  Returns:
    ``(n,)`` departure times.
  """
  a = np.asarray(arrivals, dtype=np.float64).reshape(-1)
  x = np.asarray(service, dtype=np.float64).reshape(-1)
  c = _positive_int("servers", servers)
  if x.shape != a.shape or (a.size and (np.any(np.diff(a) < 0) or x.min() < 0)):
    raise ValueError("arrivals must be non-decreasing and service non-negative, of one length")
  free = [0.0] * c  # a heap of the times the servers free up
  out = np.empty_like(a)
  for j in range(a.shape[0]):
    start = max(a[j], heapq.heappop(free))
    out[j] = start + x[j]
    heapq.heappush(free, out[j])
  return out


def simulate_mmc(rng: np.random.Generator, rate: float, service_rate: float, servers: int,
                 num_requests: int) -> np.ndarray:
  """Sojourn times of ``num_requests`` arrivals to an FCFS M/M/c queue started empty.

  A discrete-event simulation (:func:`simulate_fcfs` on Poisson arrivals and exponential
  services), to check :func:`mmc_sojourn_sf` against.
  """
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
  lam = _finite_number("rate", rate, low=0, low_open=True)
  mu = _finite_number("service_rate", service_rate, low=0, low_open=True)
  c = _positive_int("servers", servers)
  n = _positive_int("num_requests", num_requests)
  arrivals = np.cumsum(rng.exponential(1 / lam, n))
  return simulate_fcfs(arrivals, rng.exponential(1 / mu, n), c) - arrivals


def simulate_cascade(rng: np.random.Generator, rate: float, exit_stage, service_times,
                     replicas, tp, *, alpha: float = 0.7) -> np.ndarray:
  """End-to-end latencies of requests through the cascade, by discrete-event simulation.

  Requests arrive as a Poisson process at ``rate``; request ``n`` visits models
  ``0 .. exit_stage[n]`` in turn, entering model ``i + 1`` when it leaves model ``i``. Model
  ``i`` runs ``replicas[i]`` FCFS servers, each serving in ``Exp(mean s_i / tp[i]**alpha)``.
  Unlike the per-model p95 of the MILP, this is the latency a request sees across stages
  (no independence between stages assumed).

  Args:
    rng: a numpy ``Generator``.
    rate: arrivals per time unit.
    exit_stage: ``(n,)`` the model that answers each request, in arrival order (e.g.
      :func:`cascade_route` of sampled requests).
    service_times: ``(C,)`` one worker's mean time per request ``s_i``.
    replicas, tp: ``(C,)`` each model's strategy (a :class:`LatencyTable`'s entries at its
      allocation); a model that some request reaches needs ``replicas >= 1``.
    alpha: the speed-up exponent of ``tp`` workers on one replica.

  Returns:
    ``(n,)`` end-to-end latencies, in arrival order.
  """
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng must be a numpy Generator, got {type(rng).__name__}")
  lam = _finite_number("rate", rate, low=0, low_open=True)
  a = _finite_number("alpha", alpha, low=0, high=1, low_open=True)
  s = np.asarray(service_times, dtype=np.float64).reshape(-1)
  stage = np.asarray(exit_stage).reshape(-1)
  d, t = np.asarray(replicas).reshape(-1), np.asarray(tp).reshape(-1)
  if s.size < 1 or not np.all(np.isfinite(s)) or s.min() <= 0:
    raise ValueError(f"service_times must be positive finite times, got {s.tolist()}")
  if d.shape != s.shape or t.shape != s.shape:
    raise ValueError(f"replicas and tp need one entry per model ({s.size}), got {d.shape}, "
                     f"{t.shape}")
  if stage.size < 1 or stage.min() < 0 or stage.max() >= s.size:
    raise ValueError(f"exit_stage must be model indices in [0, {s.size - 1}]")
  reached = np.array([np.any(stage >= i) for i in range(s.size)])
  if np.any(reached & ((d < 1) | (t < 1))):
    raise ValueError(f"replicas and tp must be >= 1 for every model a request reaches, got "
                     f"replicas {d.tolist()}, tp {t.tolist()}")
  arrive = np.cumsum(rng.exponential(1 / lam, stage.size))
  time = arrive.copy()  # when each request enters its next model
  for i in range(s.size):
    idx = np.flatnonzero(stage >= i)
    if idx.size == 0:
      break
    order = idx[np.argsort(time[idx], kind="stable")]
    work = rng.exponential(s[i] / t[i] ** a, order.size)
    time[order] = simulate_fcfs(time[order], work, int(d[i]))
  return time - arrive


class LatencyTable(NamedTuple):
  """``l_i(f)`` for ``f = 0 .. N`` workers and the strategy that attains it.

  Attributes:
    latency: ``(C, N + 1)`` p95 latency (``inf``: no stable strategy; ``0`` for a model no
      request reaches).
    replicas: ``(C, N + 1)`` data-parallel replicas ``d`` of the best strategy.
    tp: ``(C, N + 1)`` workers per replica ``t`` (``d t <= f``).
  """

  latency: np.ndarray
  replicas: np.ndarray
  tp: np.ndarray


def latency_table(rate: float, workload, service_times, num_workers: int, *,
                  alpha: float = 0.7, percentile: float = 0.95) -> LatencyTable:
  """Each model's p95 latency with ``f = 0 .. N`` workers, under its best strategy.

  Model ``i`` receives Poisson traffic at ``lambda w_i``. With ``f`` workers it runs ``d``
  replicas of ``t`` workers (``d t <= f``), each an ``Exp(t**alpha / s_i)`` server; its
  latency is the smallest M/M/d p95 over ``t = 1 .. f`` with ``d = floor(f / t)``.

  Args:
    rate: ``lambda``, requests per time unit entering the cascade (``>= 0``).
    workload: ``(C,)`` fractions ``w_i`` in ``[0, 1]`` (:func:`workloads`).
    service_times: ``(C,)`` positive ``s_i``: one worker's mean time per request.
    num_workers: ``N``.
    alpha: the speed-up exponent of ``t`` workers serving one replica, in ``(0, 1]``.
    percentile: the latency quantile (0.95).

  Returns:
    A :class:`LatencyTable`.
  """
  lam = _finite_number("rate", rate, low=0)
  n = _positive_int("num_workers", num_workers)
  a = _finite_number("alpha", alpha, low=0, high=1, low_open=True)
  _finite_number("percentile", percentile, low=0, high=1, low_open=True, high_open=True)
  w = np.asarray(workload, dtype=np.float64).reshape(-1)
  s = np.asarray(service_times, dtype=np.float64).reshape(-1)
  if not np.all(np.isfinite(w)) or w.min() < 0 or w.max() > 1:
    raise ValueError(f"workload must be fractions in [0, 1], got {w.tolist()}")
  if s.shape != w.shape or not np.all(np.isfinite(s)) or s.min() <= 0:
    raise ValueError(f"service_times must be {w.shape[0]} positive finite times (one per model), "
                     f"got {s.tolist()}")
  num_models = w.shape[0]
  latency = np.full((num_models, n + 1), math.inf)
  replicas = np.zeros((num_models, n + 1), np.int64)
  tp = np.zeros((num_models, n + 1), np.int64)
  for i in range(num_models):
    li = lam * w[i]
    if li == 0:  # no traffic: no latency, whatever the workers
      latency[i] = 0.0
      continue
    for f in range(1, n + 1):
      for t in range(1, f + 1):
        d = f // t
        value = mmc_p95(li, t ** a / s[i], d, percentile)
        if value < latency[i, f]:
          latency[i, f], replicas[i, f], tp[i, f] = value, d, t
  return LatencyTable(latency, replicas, tp)


# --------------------------------------------------------------------------- allocation

class Allocation(NamedTuple):
  """Workers per model and the objective ``L = max_i l_i(f_i)`` (``inf``, ``workers=None``:
  no allocation of ``N`` workers keeps every queue stable)."""

  workers: tuple[int, ...] | None
  latency: float


def _table(table, num_workers: int) -> np.ndarray:
  n = _positive_int("num_workers", num_workers)
  t = np.asarray(table, dtype=np.float64)
  if t.ndim != 2 or t.shape[1] != n + 1 or t.shape[0] < 1:
    raise ValueError(f"table must be (models, num_workers + 1) = (C, {n + 1}) latencies "
                     f"l_i(f) for f = 0..{n}, got shape {t.shape}")
  if np.isnan(t).any() or t.min() < 0:
    raise ValueError("table must hold non-negative latencies (inf allowed), no NaN")
  with np.errstate(invalid="ignore"):
    step = np.diff(t, axis=1)
  if (step > 1e-9 * np.maximum(1.0, np.where(np.isfinite(t[:, :-1]), t[:, :-1], 1.0))).any():
    raise ValueError("table must be non-increasing in the number of workers (row i: l_i(f) >= "
                     "l_i(f + 1)); a strategy for f workers also fits f + 1")
  return t


def allocate(table, num_workers: int) -> Allocation:
  """The MILP of Cascadia's inner level, solved by ``scipy.optimize.milp`` (HiGHS).

  ``min L`` over binaries ``x_{i,f}`` and ``L >= 0`` with ``sum_f x_{i,f} = 1``,
  ``sum_{i,f} f x_{i,f} = N`` and ``L >= sum_f l_i(f) x_{i,f}``; entries ``l_i(f) = inf``
  (an unstable queue) fix ``x_{i,f} = 0``.

  Args:
    table: ``(C, N + 1)`` latencies ``l_i(f)``, non-increasing in ``f`` (a
      :class:`LatencyTable`'s ``latency``).
    num_workers: ``N``.

  Returns:
    An :class:`Allocation`.
  """
  t = _table(table, num_workers)
  num_models, width = t.shape
  nx = num_models * width
  finite = np.isfinite(t)
  if not finite.any(axis=1).all():
    return Allocation(None, math.inf)
  coef = np.where(finite, t, 0.0)
  fs = np.arange(width, dtype=np.float64)
  c = np.zeros(nx + 1)
  c[-1] = 1.0  # minimize L
  one_each = np.zeros((num_models, nx + 1))
  bound_l = np.zeros((num_models, nx + 1))
  for i in range(num_models):
    one_each[i, i * width:(i + 1) * width] = 1.0
    bound_l[i, i * width:(i + 1) * width] = coef[i]
    bound_l[i, -1] = -1.0  # sum_f l_i(f) x_{i,f} - L <= 0
  total = np.concatenate([np.tile(fs, num_models), [0.0]])[None]
  constraints = [optimize.LinearConstraint(one_each, 1.0, 1.0),
                 optimize.LinearConstraint(total, width - 1, width - 1),
                 optimize.LinearConstraint(bound_l, -np.inf, 0.0)]
  upper = np.concatenate([finite.reshape(-1).astype(np.float64), [np.inf]])
  integrality = np.concatenate([np.ones(nx), [0]])
  res = optimize.milp(c, constraints=constraints, integrality=integrality,
                      bounds=optimize.Bounds(np.zeros(nx + 1), upper))
  if res.status == 2:  # infeasible: N workers cannot keep every queue stable
    return Allocation(None, math.inf)
  if not res.success:
    raise RuntimeError(f"milp failed: {res.message}")
  x = np.round(res.x[:nx]).reshape(num_models, width)
  workers = tuple(int(np.argmax(row)) for row in x)
  return Allocation(workers, float(max(t[i, f] for i, f in enumerate(workers))))


def allocate_brute_force(table, num_workers: int) -> Allocation:
  """Every split of ``N`` workers over the models (``sum_i f_i = N``), the one with the
  smallest ``max_i l_i(f_i)`` (first in lexicographic order on ties). The reference the
  MILP is tested against; ``O((N + 1)^(C - 1))``."""
  t = _table(table, num_workers)
  num_models, width = t.shape
  best = Allocation(None, math.inf)
  for head in itertools.product(range(width), repeat=num_models - 1):
    last = (width - 1) - sum(head)
    if last < 0:
      continue
    workers = (*head, last)
    value = max(t[i, f] for i, f in enumerate(workers))
    if value < best.latency:
      best = Allocation(tuple(int(f) for f in workers), float(value))
  return best


def _split(shares: np.ndarray, active: np.ndarray, num_workers: int) -> tuple[int, ...] | None:
  """``N`` workers in proportion to ``shares`` over the active models, at least one each,
  by largest remainders (ties to the earlier model)."""
  k = int(active.sum())
  if k > num_workers:
    return None
  workers = active.astype(np.int64).copy()
  share = np.where(active, shares, 0.0)
  share = share / share.sum() if share.sum() > 0 else active / k
  quota = share * (num_workers - k)
  workers += np.floor(quota).astype(np.int64)
  rest = num_workers - workers.sum()
  order = sorted(np.flatnonzero(active), key=lambda i: (-(quota[i] - np.floor(quota[i])), i))
  for i in order[:rest]:
    workers[i] += 1
  return tuple(int(f) for f in workers)


def uniform_allocation(table, num_workers: int) -> Allocation:
  """Equal workers per model (``N // C`` each, the remainder one each to the first
  models), the uniform baseline."""
  t = _table(table, num_workers)
  num_models = t.shape[0]
  workers = tuple(num_workers // num_models + (i < num_workers % num_models)
                  for i in range(num_models))
  return Allocation(workers, float(max(t[i, f] for i, f in enumerate(workers))))


def proportional_allocation(table, num_workers: int, load) -> Allocation:
  """Workers in proportion to each model's compute load (``load_i = w_i s_i``), at least
  one per model with traffic (largest remainders); the routing-only baseline's rule."""
  t = _table(table, num_workers)
  ld = np.asarray(load, dtype=np.float64).reshape(-1)
  if ld.shape[0] != t.shape[0] or not np.all(np.isfinite(ld)) or ld.min() < 0:
    raise ValueError(f"load must be {t.shape[0]} non-negative finite loads, got {ld.tolist()}")
  workers = _split(ld, ld > 0, num_workers)
  if workers is None:
    return Allocation(None, math.inf)
  return Allocation(workers, float(max(t[i, f] for i, f in enumerate(workers))))


# --------------------------------------------------------------------------- outer search

def chebyshev_objective(latency: float, quality: float, q_min: float, z1: float, z2: float,
                        mu: float) -> float:
  """``J = L + mu max(0, (q_min - Q) / (z1* - z2*))`` (``inf`` when ``L`` is)."""
  spread = z1 - z2
  if spread <= 0:
    raise ValueError(f"z1 (all to the largest model) must exceed z2 (all to the smallest), "
                     f"got z1 = {z1}, z2 = {z2}")
  return latency + mu * max(0.0, (q_min - quality) / spread)


class SearchResult(NamedTuple):
  """The outer search's answer and its trace.

  Attributes:
    thresholds: the best ``theta`` found.
    objective: its ``J``; ``latency`` and ``quality``: its ``L`` and ``Q``.
    rounds: coordinate-search rounds run; ``evaluations``: distinct ``theta`` evaluated.
    history: ``J`` after each round.
  """

  thresholds: tuple[float, ...]
  objective: float
  latency: float
  quality: float
  rounds: int
  evaluations: int
  history: tuple[float, ...]


def search_thresholds(evaluate: Callable[[tuple[float, ...]], tuple[float, float]],
                      num_thresholds: int, grid: Sequence[float], *, q_min: float, z1: float,
                      z2: float, mu: float,
                      starts: Sequence[Sequence[float]] | None = None,
                      patience: int = 2, max_rounds: int = 20, tol: float = 1e-9
                      ) -> SearchResult:
  """Cascadia's outer loop: coordinate search over thresholds on the Chebyshev objective.

  The search begins at the candidate start with the smallest ``J`` (``theta_0``). Each
  round sweeps ``h_1 .. h_{C-1}`` in order; for each it tries every grid value with the
  others fixed and keeps the one with the smallest ``J`` (the current value on ties, so
  ``J`` never rises). The search stops when ``J`` has moved by at most ``tol`` for
  ``patience`` consecutive rounds, or after ``max_rounds``. Coordinate search is local:
  from a start where the queues are unstable (``J = inf``) or under the floor it can stop
  at a point where no single threshold helps while a joint move would, so several starts
  (e.g. a coarse grid) make it more robust.

  Args:
    evaluate: ``theta -> (L(theta), Q(theta))``, e.g. the MILP's latency on the latency
      table of :func:`workloads` and :func:`cascade_quality` (memoized here).
    num_thresholds: ``C - 1``.
    grid: candidate threshold values in ``[0, 1]``.
    q_min, z1, z2, mu: the quality floor, ``z1*``, ``z2*`` and the penalty weight.
    starts: candidate ``theta_0`` values, each of ``C - 1`` thresholds in ``[0, 1]``
      (default: the one with every threshold at the grid's largest value, sending the
      most traffic to the largest model).
    patience: ``K``, rounds with a stable ``J`` before stopping.
    max_rounds: a cap on rounds.
    tol: the change in ``J`` counted as stable.

  Returns:
    A :class:`SearchResult`.
  """
  k = _positive_int("num_thresholds", num_thresholds)
  g = np.asarray(grid, dtype=np.float64).reshape(-1)
  if g.size < 1 or not np.all(np.isfinite(g)) or g.min() < 0 or g.max() > 1:
    raise ValueError(f"grid must be a non-empty sequence of thresholds in [0, 1], got "
                     f"{np.asarray(grid).tolist()}")
  k_patience = _positive_int("patience", patience)
  rounds_cap = _positive_int("max_rounds", max_rounds)
  _finite_number("mu", mu, low=0)
  _finite_number("q_min", q_min, low=0, high=1)
  if starts is None:
    starts = [[g.max()] * k]
  starts = [list(_thresholds(th, k + 1)) for th in starts]
  if not starts:
    raise ValueError("starts must hold at least one theta_0")
  cache: dict[tuple[float, ...], tuple[float, float, float]] = {}

  def score(th: Sequence[float]) -> tuple[float, float, float]:
    key = tuple(float(x) for x in th)
    if key not in cache:
      lat, q = evaluate(key)
      cache[key] = (chebyshev_objective(lat, q, q_min, z1, z2, mu), float(lat), float(q))
    return cache[key]

  theta = min(starts, key=lambda th: score(th)[0])  # the first of the lowest J
  best = score(theta)
  history, stable, rounds = [], 0, 0
  while rounds < rounds_cap and stable < k_patience:
    before = best[0]
    for j in range(k):
      for value in g:
        cand = theta.copy()
        cand[j] = float(value)
        trial = score(cand)
        if trial[0] < best[0]:
          theta, best = cand, trial
    rounds += 1
    history.append(best[0])
    moved = not (abs(best[0] - before) <= tol or best[0] == before)
    stable = 0 if moved else stable + 1
  return SearchResult(tuple(float(x) for x in theta), best[0], best[1], best[2], rounds,
                      len(cache), tuple(history))


def max_feasible_rate(feasible: Callable[[float], bool], low: float, high: float,
                      iters: int = 20) -> float:
  """The largest ``lambda`` in ``[low, high]`` with ``feasible(lambda)``, by bisection on
  ``log lambda`` (midpoint ``sqrt(lo hi)``: the bracket may span orders of magnitude).

  Assumes feasibility is monotone (feasible below some rate, infeasible above). Returns
  ``0.0`` if ``low`` is infeasible and ``high`` if ``high`` is feasible; otherwise the last
  feasible midpoint, within a factor ``(high / low) ** (1 / 2**iters)`` of the boundary.
  """
  lo = _finite_number("low", low, low=0, low_open=True)
  hi = _finite_number("high", high, low=lo, low_open=True)
  n = _positive_int("iters", iters)
  if not feasible(lo):
    return 0.0
  if feasible(hi):
    return hi
  for _ in range(n):
    mid = math.sqrt(lo * hi)
    if feasible(mid):
      lo = mid
    else:
      hi = mid
  return lo
