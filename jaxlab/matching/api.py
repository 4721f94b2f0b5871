"""Public API of incremental matching: init / insert / insert_batch / queries.

``insert`` and ``insert_batch`` validate their input eagerly (shape, finite
coordinates, valid row index, capacity), then run a jitted step whose shapes
are fixed by the state, so a stream of insertions compiles once.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_int
from jaxlab.matching.exact import insert_exact
from jaxlab.matching.greedy import insert_greedy
from jaxlab.matching.push_relabel import (
    check_push_relabel_invariants,
    cost_dtype,
    init_extra,
    insert_batch_push_relabel,
    insert_push_relabel,
)
from jaxlab.matching.reference import check_metric
from jaxlab.matching.state import (
    ALGORITHMS,
    MatchConfig,
    MatchState,
    distance_row,
    matched_cost,
)

# XLA:CPU's copy insertion with region-based live ranges: without it, the arrays carried
# through the insertion loops (duals, levels, assignments) are copied wherever they pass
# through a conditional (every step and round has several). The same program, bit for bit
# (the trajectory tests run through these functions), with fewer copies: on 2 cores,
# push-relabel's sequential insertion 30-35% faster and its batch rounds 12-17% faster
# (uniform n = 1,000 and 2,000; experiments.bench_matching records the times). Set for
# CPU programs only (the field is XLA:CPU's).
#
# Without XLA's tree-reduction rewriter: it splits every reduction over more than 32
# elements into windowed reductions (reduce-window, then reduce), which keeps long float
# sums accurate; XLA:CPU runs those windows as separate, slow loops. The insertion
# programs' n-wide reductions are minima, maxima and logical ors of slacks, ranks and
# priorities (exact in any order), and the only float sum in them is a distance over more
# than 16 coordinates (state.distance_row), which is then summed in order: the same
# programs, bit for bit on the tested instances, with both the sequential steps and the
# batch rounds faster (experiments.bench_matching records the times). The pass name is
# XLA's; an XLA that renamed the pass would ignore the option and compile as before.
#
# Without XLA:CPU's parallel task assigner: it marks loop fusions whose estimated cost
# passes a threshold to run in parts on XLA's thread pool. In the batch rounds that marks
# the per-round slack computations (gathered rows x n), down to the smallest gathers: a
# few microseconds of work per round, less than handing half of it to another thread and
# waiting for it costs. Without the split the batch rounds ran faster at n = 1,000-2,000
# on 2 cores and about as fast at n = 10,000 (docs/methods/matching_incremental.md has the
# recorded before/after table). In the sequential programs it marked one fusion, from
# n = 2,000 on, in the branch of steps above level 0. The parts compute disjoint outputs:
# the same results, bit for bit on the tested instances. Inside a caller's jax.jit these
# options do not apply (see _compiled).
COMPILER_OPTIONS = {"xla_cpu_copy_insertion_use_region_analysis": True,
                    "xla_disable_hlo_passes": "tree_reduction_rewriter,cpu-parallel-task-assigner"}


def _compiled(fn):
  """``fn(state, requests)`` jitted, with :data:`COMPILER_OPTIONS` when the default backend
  is the CPU. Inside a caller's trace (``jax.jit``, ``vmap``, ``scan``, ...) ``fn`` is
  traced into the caller's program, whose compiler options apply: JAX accepts them on the
  outermost jit only. (The public functions pass ``requests`` through ``_check_requests``,
  whose ``jnp.asarray`` makes it a tracer inside any trace, closed-over inputs included.)"""
  jitted = {True: jax.jit(fn, compiler_options=COMPILER_OPTIONS), False: jax.jit(fn)}

  def pick():
    return jitted[jax.default_backend() == "cpu"]

  @functools.wraps(fn)
  def call(state: MatchState, requests: jax.Array) -> MatchState:
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((state, requests))):
      return fn(state, requests)
    return pick()(state, requests)

  call.lower = lambda *args, **kwargs: pick().lower(*args, **kwargs)
  call.cpu = jitted[True]  # the CPU program, whatever the default backend (for its tests)
  return call


_PUSH_RELABEL_OPTIONS = ("delta", "eps", "levels", "exact_tail", "seed", "omega_init",
                         "cost_dtype", "top_level", "batch_relabel")


def init(
    servers: jax.typing.ArrayLike,
    *,
    algorithm: str = "push_relabel",
    metric: str = "euclidean",
    capacity: int | None = None,
    **options: Any,
) -> MatchState:
  """An empty matching against a fixed server set.

  Args:
    servers: ``(n, dim)`` coordinates, or for ``metric="precomputed"`` a
      ``(rows, n)`` distance matrix whose rows are the possible requests.
    algorithm: "push_relabel" (the paper's approximation), "exact" (one
      shortest augmenting path per insertion; optimal after every insertion)
      or "greedy" (nearest free server).
    metric: "euclidean", "l1" or "precomputed".
    capacity: maximum number of requests (default and maximum: n).
    **options: push-relabel options ``delta`` (0.001), ``eps`` (0.2),
      ``levels`` (5), ``exact_tail`` (0: off), ``seed`` (0), and three that
      select the official C++ code's behaviour instead of ours (see
      ``push_relabel``):

      * ``omega_init``: "nearest" (default: omega starts at the first
        request's distance to its nearest server, scale-free) or "one" (the
        C++: omega starts at 1, whatever the data's units);
      * ``cost_dtype``: "float32" (default) or "float64" (the C++ doubles:
        coordinates are stored and distances and scaled costs computed in
        float64). "float64" needs 64-bit JAX (``jax.config.update(
        "jax_enable_x64", True)`` or ``with jax.enable_x64(True):`` around
        init and the insertions): a ValueError otherwise;
      * ``top_level``: "stay" (default: a request whose dual reaches
        ``y_max`` at the top level stays there) or "raise" (the C++ calls
        ``exit(0)`` there; a jitted step cannot, so that insertion is undone,
        ``state.extra.overflowed`` is set and every later insertion is a
        no-op: check the flag, or ``num_inserted``, after inserting).

      ``insert_batch`` (parallel rounds) accepts only the defaults of
      ``cost_dtype`` and ``top_level``, and one more option,
      ``batch_relabel``: "global" (default, the paper's rule: a relabel round
      raises every free request of the level by the minimum slack among them,
      + 1) or "own" (not the paper's: each by its own minimum slack + 1, as a
      sequential relabel does; duals stay 1-feasible, and every raised request
      that stays at the level then has an admissible edge, so fewer relabels
      read the same requests again).

  Returns:
    A :class:`MatchState`.

  Example:
    >>> state = init(servers, algorithm="exact")
    >>> for r in requests:
    ...   state = insert(state, r)
    >>> assignment(state), cost(state)
  """
  if algorithm not in ALGORITHMS:
    raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
  check_metric(metric)
  unknown = set(options) - set(_PUSH_RELABEL_OPTIONS)
  if unknown or (options and algorithm != "push_relabel"):
    raise ValueError(
        f"options {sorted(options)} are not accepted by algorithm={algorithm!r}; "
        f"push_relabel accepts {_PUSH_RELABEL_OPTIONS}")
  if "seed" in options:  # else jax.random.key fails deep inside the first insert's trace
    options["seed"] = check_int(options["seed"], "seed")
  options = {k: int(v) if isinstance(v, np.integer) else v for k, v in options.items()}
  servers = np.asarray(servers)
  if servers.ndim != 2 or servers.shape[0] == 0 or servers.shape[1] == 0:
    raise ValueError(f"servers must be a non-empty 2-D array, got shape {servers.shape}")
  with np.errstate(over="ignore"):
    finite = np.all(np.isfinite(servers.astype(np.float32)))
  if not finite:
    raise ValueError("servers must be finite in float32 (the algorithms' dtype)")
  if metric == "precomputed":
    # Any finite non-negative cost matrix (a metric for push_relabel's guarantee).
    if np.any(servers < 0):
      raise ValueError("a precomputed cost matrix must be non-negative")
    n, dim = servers.shape[1], 0
    _check_distance_bound(float(np.max(servers)), n, "servers (the cost matrix)")
  else:
    n, dim = servers.shape
    _check_coordinates(servers, servers, metric, n, "servers")
  capacity = n if capacity is None else capacity
  if not isinstance(capacity, (int, np.integer)) or not 1 <= capacity <= n:
    raise ValueError(f"capacity must be an int in 1..{n} (the number of servers), got {capacity}")
  config = MatchConfig(algorithm, metric, int(capacity), int(n), int(dim), **options)
  extra = None
  if algorithm == "push_relabel":
    extra = init_extra(config, np)  # validates the options (and 64-bit JAX for "float64")
  dtype = cost_dtype(config)  # float32 unless push_relabel's cost_dtype="float64"
  if metric == "precomputed":
    requests = np.zeros((capacity,), np.int32)
  else:
    requests = np.zeros((capacity, dim), dtype)
  # Host arrays put on the device: no fill program is compiled per shape.
  return jax.device_put(MatchState(
      servers=np.asarray(servers, dtype),
      requests=requests,
      count=np.zeros((), np.int32),
      server_of=np.full((capacity,), -1, np.int32),
      request_of=np.full((n,), -1, np.int32),
      # The exact tail's potentials are sums of distances: the distances' dtype.
      u=np.zeros((capacity,), dtype),
      v=np.zeros((n,), dtype),
      extra=extra,
      rejected=np.zeros((), bool),
      config=config,
  ))


def max_distance_allowed(num_servers: int) -> float:
  """Largest distance a matching accepts: the duals, path lengths and costs
  (sums of up to ``num_servers + 1`` distances) must stay finite in float32."""
  return float(np.finfo(np.float32).max) / (4.0 * (num_servers + 1))


def _check_coordinates(a: np.ndarray, b: np.ndarray, metric: str, num_servers: int,
                       name: str) -> None:
  """Rejects coordinates whose distances (or euclidean squares) could overflow float32.

  ``reach``, the largest ``|a_k| + |b_k|``, bounds every coordinate difference,
  so ``dim * reach`` (l1) or ``sqrt(dim) * reach`` (euclidean, whose squares
  must stay finite too) bounds every distance.
  """
  dim = a.shape[-1]
  reach = float(np.max(np.abs(a.astype(np.float64)))) + float(np.max(np.abs(b.astype(np.float64))))
  limit = max_distance_allowed(num_servers)
  if metric == "l1":
    allowed = limit / dim
  else:
    allowed = min(limit, math.sqrt(float(np.finfo(np.float32).max) / 4)) / math.sqrt(dim)
  if not reach <= allowed:
    raise ValueError(
        f"{name} coordinates are too large for float32 distances (the algorithms' dtype): "
        f"max |request| + max |server| per coordinate must be at most {allowed:.3g} "
        f"for {metric} in {dim}-D with {num_servers} servers, got {reach:.3g}; "
        "scale the coordinates down")


def _check_distance_bound(bound: float, num_servers: int, name: str) -> None:
  limit = max_distance_allowed(num_servers)
  if not bound <= limit:
    raise ValueError(
        f"{name} entries are too large: distances up to {bound:.3g} would overflow "
        f"float32 sums (the algorithms' dtype); they must be at most {limit:.3g} "
        f"for {num_servers} servers")


def _check_requests(state: MatchState, requests: Any, batched: bool) -> jax.Array:
  cfg = state.config
  name = "requests" if batched else "request"
  cost_dtype(cfg)  # float64 state without 64-bit JAX: a ValueError, not float32 in disguise
  if isinstance(requests, jax.core.Tracer):
    return requests
  r = np.asarray(requests)
  if cfg.metric == "precomputed":
    want = 1 if batched else 0
    if r.ndim != want or not np.issubdtype(r.dtype, np.integer):
      raise ValueError(f"{name} must be {'a 1-D array of' if batched else 'an'} integer row "
                       f"index{'es' if batched else ''} into the distance matrix, got {r!r}")
    if np.any((r < 0) | (r >= state.servers.shape[0])):
      raise ValueError(f"{name} row index out of range 0..{state.servers.shape[0] - 1}")
    out = jnp.asarray(r, jnp.int32)
  else:
    want = (r.shape[0], cfg.dim) if batched and r.ndim == 2 else (cfg.dim,)
    if r.shape != want or (batched and r.ndim != 2):
      raise ValueError(f"{name} must have shape {'(batch, ' if batched else '('}{cfg.dim}"
                       f"{')' if batched else ',)'}, got {r.shape}")
    with np.errstate(over="ignore"):
      finite = np.all(np.isfinite(r.astype(np.float32)))
    if not finite:
      raise ValueError(f"{name} coordinates must be finite in float32")
    if r.size:
      _check_coordinates(r, np.asarray(state.servers), cfg.metric, cfg.num_servers, name)
    out = jnp.asarray(r, state.requests.dtype)
  num = r.shape[0] if batched else 1
  if not isinstance(state.count, jax.core.Tracer) and int(state.count) + num > cfg.capacity:
    raise ValueError(
        f"inserting {num} request(s) would exceed capacity={cfg.capacity} "
        f"({int(state.count)} already inserted)")
  return out


def _acceptable(state: MatchState, requests: jax.Array, num: int) -> jax.Array:
  """Traced version of the eager checks (for calls inside a caller's jit)."""
  ok = state.count + num <= state.config.capacity
  if state.config.metric == "precomputed":
    return ok & jnp.all((requests >= 0) & (requests < state.servers.shape[0]))
  # Finite coordinates can still have distances that overflow float32 (about
  # 1e19 for euclidean): check the rows themselves, against the eager bound.
  rows = requests[None] if requests.ndim == 1 else requests
  dist = jax.vmap(lambda r: distance_row(state, r))(rows)
  limit = max_distance_allowed(state.config.num_servers)
  return ok & jnp.all(jnp.isfinite(requests)) & jnp.all(dist <= limit)


def _reject(state: MatchState, requests: jax.Array) -> MatchState:
  del requests
  return state.replace(rejected=jnp.ones((), bool))


def _insert_checked(state: MatchState, request: jax.Array) -> MatchState:
  return jax.lax.cond(_acceptable(state, request, 1), _insert_unchecked, _reject, state, request)


_insert = _compiled(_insert_checked)


def _insert_unchecked(state: MatchState, request: jax.Array) -> MatchState:
  cfg = state.config
  if cfg.algorithm == "push_relabel" and cfg.top_level == "raise":
    # Once a dual has passed the top level (where the C++ code exits) insertions are
    # no-ops; requests[count] keeps the request that overflowed.
    return jax.lax.cond(state.extra.overflowed, lambda s, r: s, _store_and_insert, state, request)
  return _store_and_insert(state, request)


def _store_and_insert(state: MatchState, request: jax.Array) -> MatchState:
  row = state.count
  state = state.replace(requests=state.requests.at[row].set(request))
  algorithm = state.config.algorithm
  if algorithm == "exact":
    return insert_exact(state, row)
  if algorithm == "greedy":
    return insert_greedy(state, row)
  return insert_push_relabel(state, row)


def insert(state: MatchState, request: jax.typing.ArrayLike) -> MatchState:
  """Inserts one request (coordinates, or a row index for "precomputed")."""
  return _insert(state, _check_requests(state, request, batched=False))


def _insert_all(state: MatchState, requests: jax.Array) -> MatchState:
  state, _ = jax.lax.scan(lambda s, r: (_insert_checked(s, r), None), state, requests)
  return state


_insert_many = _compiled(_insert_all)


def _insert_batch_checked(state: MatchState, requests: jax.Array) -> MatchState:
  ok = _acceptable(state, requests, requests.shape[0])
  return jax.lax.cond(ok, _insert_batch_unchecked, _reject, state, requests)


_insert_batch = _compiled(_insert_batch_checked)


def _insert_batch_unchecked(state: MatchState, requests: jax.Array) -> MatchState:
  if state.config.algorithm == "push_relabel":
    return insert_batch_push_relabel(state, requests)
  return _insert_all(state, requests)


def insert_batch(state: MatchState, requests: jax.typing.ArrayLike) -> MatchState:
  """Inserts a batch of requests (one compiled function per batch size).

  For "push_relabel" this is the paper's parallel algorithm: the batch's
  requests are matched together in rounds (see ``push_relabel``); for "exact"
  and "greedy" it equals inserting them one by one.
  """
  requests = _check_requests(state, requests, batched=True)
  if requests.shape[0] == 0:  # nothing to insert (the jitted rounds need a request)
    return state
  return _insert_batch(state, requests)


def insert_many(state: MatchState, requests: jax.typing.ArrayLike) -> MatchState:
  """Inserts requests one at a time, in order, inside one compiled scan.

  The same result as calling :func:`insert` for each (for "push_relabel", the
  sequential algorithm), without a Python round trip per request.
  """
  requests = _check_requests(state, requests, batched=True)
  if requests.shape[0] == 0:
    return state
  return _insert_many(state, requests)


def assignment(state: MatchState) -> np.ndarray:
  """Server index of each inserted request, in arrival order: ``(num_inserted,)``."""
  return np.asarray(state.server_of)[: int(state.count)]


_cost = jax.jit(matched_cost)


def cost(state: MatchState) -> jax.Array:
  """Total distance of the current matching."""
  return _cost(state)


def num_inserted(state: MatchState) -> int:
  return int(state.count)


def check_invariants(state: MatchState, atol: float = 1e-3) -> None:
  """Raises ``AssertionError`` if the state is not a valid matching.

  Checks: every inserted request holds a distinct server and ``request_of`` is
  its inverse; for "exact", the potentials are dual feasible
  (``u_i + v_j <= c_ij + atol``) and tight on the matching; for
  "push_relabel", the per-level 1-feasibility and tightness of its duals.
  """
  if bool(state.rejected):
    raise AssertionError("an insertion was rejected inside jit (capacity or bad input)")
  k = int(state.count)
  server_of = np.asarray(state.server_of)
  request_of = np.asarray(state.request_of)
  matched = server_of[:k]
  if np.any(matched < 0) or len(np.unique(matched)) != k:
    raise AssertionError(f"matching is not one-to-one: {matched}")
  if np.any(server_of[k:] != -1):
    raise AssertionError("unused request slots hold servers")
  held = np.nonzero(request_of >= 0)[0]
  if len(held) != k or np.any(request_of[matched] != np.arange(k)):
    raise AssertionError("request_of is not the inverse of server_of")
  if not np.isfinite(float(_cost(state))):
    raise AssertionError("the matching's cost is not finite")
  if state.config.algorithm == "exact" and k:
    if not (np.all(np.isfinite(np.asarray(state.u))) and np.all(np.isfinite(np.asarray(state.v)))):
      raise AssertionError("exact potentials are not finite")
    from jaxlab.matching.reference import cost_matrix

    req = np.asarray(state.requests)[:k]
    c = cost_matrix(req, np.asarray(state.servers), state.config.metric)
    reduced = c - np.asarray(state.u)[:k, None] - np.asarray(state.v)[None, :]
    scale = atol * max(1.0, float(np.abs(c).max()))
    if reduced.min() < -scale:
      raise AssertionError(f"exact duals infeasible: min reduced cost {reduced.min()}")
    tight = reduced[np.arange(k), matched]
    if np.abs(tight).max() > scale:
      raise AssertionError(f"exact duals not tight on the matching: {np.abs(tight).max()}")
  if state.config.algorithm == "push_relabel":
    check_push_relabel_invariants(state)
