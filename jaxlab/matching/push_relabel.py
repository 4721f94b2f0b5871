r"""The paper's incremental push-relabel matching (sequential insertion).

Each request carries an integer dual per level and a level; each server an
integer dual per level. At level ``l`` costs are scaled integers

.. math::
  d_0(r, s) = \lceil 2 n\, d(r, s) / (\epsilon \omega) \rceil, \quad
  d_l = \lceil d_{l-1} / (2 (1 + \epsilon)^2 n^{\phi_{l-1}}) \rceil, \quad
  \phi_i = 3^i \cdot 2\delta,

duals are 1-feasible (Gabow-Tarjan): ``y_l(r) + y_l(s) <= d_l(r, s) + 1`` for
every request and every server it may use, with equality ``= d_l`` on matched
edges; an edge is admissible when ``y_l(r) + y_l(s) = d_l + 1`` (slack -1).

Inserting a request ``r`` (the official C++ code's ``match_request_in_state``):
``y_0(r) = min(y_max(0), min_s d_0(r, s) + 1 - y_0(s))``, then repeat with the
free request ``f`` at level ``l``:

* if ``y_l(f) >= y_max(l) = (25/eps) n^{phi_l}``, move ``f`` up a level;
* else among eligible servers (free, or held by a request at level >= l) take
  an admissible free one (lowest index), else an admissible matched one
  (lowest index); push: ``y_l(s) -= 1``, match, and continue with the evicted
  request at its own level;
* else relabel: ``y_l(f) += min eligible slack + 1``.

After each insertion the omega check ``#{requests at level >= l} <=
n^{1 - Phi(l)}``, ``Phi(l) = ceil((3^l - 1)/2 * 2 delta)`` must hold; if not,
omega doubles and every request is re-inserted in arrival order.

omega, the running guess of OPT, starts by default at the first request's
distance to its nearest server (the optimum of the first prefix, so a lower
bound on every later optimum; its smallest positive distance if that is 0).
The official code starts at 1, which ties the quality to the data's units:
with coordinates scaled by 1e-3 the final cost was 4x OPT at n = 200
(scale-free here).

Differences from the official C++ code, and the options that remove them
(``MatchConfig``; the defaults are ours):

* ``omega_init="nearest"`` (default) vs ``"one"``: the C++ omega starts at 1.
* ``cost_dtype="float32"`` (default) vs ``"float64"``: the C++ coordinates,
  distances and scaled costs are doubles (needs ``jax_enable_x64``). The
  per-level constants (``y_max``, divisors, count bounds) are computed on the
  host in double precision with C's ``pow`` in either case, and ``y >=
  y_max`` is decided exactly on integers (``y >= ceil(y_max)``).
* ``top_level="stay"`` (default) vs ``"raise"``: when a request's dual reaches
  ``y_max`` at the top level ``mu + 1`` the C++ code calls ``exit(0)``; by
  default the request stays at the top level and keeps pushing / relabeling.
  A jitted step cannot exit: with ``"raise"`` the insertion stops, the state
  goes back to what it was before that insertion (``count`` not incremented)
  with ``extra.overflowed`` set, and every later insertion is a no-op.
* The optional exact tail (``exact_tail=k``: the last requests, once at most
  ``k`` servers are free, are matched by shortest augmenting paths among those
  servers only) keeps the servers it uses; the C++ tail (exactly 50 free
  servers, so never for n < 50) reloads them on every later request and can
  reuse a server. Not replicated.

With ``omega_init="one"``, ``cost_dtype="float64"``, ``top_level="raise"`` and
``exact_tail=0`` the sequential trajectory (matching, per-level duals, levels,
omega, doublings after every insertion) equals the C++ one, including its
tie-breaking: a free admissible server before a matched one, lowest index
first (``tests/matching/test_cpp_trajectory.py`` checks it against a plain
Python re-statement of the C++ code). The one residual is floating point
below the last bit: XLA rewrites ``d / divisor`` (a compile-time constant) as
``d * (1 / divisor)`` (1.6% of float64 quotients differ in the last bit), and
at XLA's default CPU optimization level LLVM contracts the distance's
``dx*dx + dy*dy`` into a fused multiply-add (8% of random float64 distances
differ in the last bit; none at the tests' optimization level 0, nor on grid
data, whose products are exact). Either moves a ``ceil`` only where a quotient
lies within an ulp of an integer: none of 10^6 random quotients did.
Removing them would take runtime divisors and XLA flags outside this module.

References:
  "Efficient Algorithms for Incremental Metric Bipartite Matching", ICLR 2026
  (OpenReview wnIanx0r0w); official code
  github.com/ritesh-777/Incremental-Metric-Bipartite-Matching-Algorithm.
  Gabow, Tarjan, "Faster scaling algorithms for network problems", 1989.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.rng import hash_bits
from jaxlab.matching.exact import insert_exact
from jaxlab.matching.state import MatchConfig, MatchState, distance_row
from kernels_pallas.matching import round_proposals, scaled_cost

_BIG = np.int32(2**30)


class PushRelabelState(NamedTuple):
  """Algorithm state of push-relabel (inside :class:`MatchState.extra`)."""

  y_r: jax.Array  # (L, capacity) int32 request duals per level
  y_s: jax.Array  # (L, n) int32 server duals per level
  level: jax.Array  # (capacity,) int32 request levels
  omega: jax.Array  # float32 guess of OPT
  restarts: jax.Array  # int32 number of omega doublings
  steps: jax.Array  # int32 pushes + relabels + level moves (+ parallel rounds)
  rounds: jax.Array  # int32 parallel rounds run by insert_batch (re-insertions included)
  fallbacks: jax.Array  # int32 requests that insert_batch placed one at a time (exact tail)
  rows_read: jax.Array  # int32 requests gathered by insert_batch's rounds (n-wide slacks each)
  tail_servers: jax.Array  # (n,) bool: servers of the exact tail (all False before it)
  overflowed: jax.Array  # bool: top_level="raise" and a dual passed the top level (inserts stop)


def num_levels(cfg: MatchConfig) -> int:
  return cfg.levels + 2  # levels 0 .. mu + 1, as the official code stores them


_INT32_MAX = 2**31 - 1


def _pow(base: float, exponent: float) -> float:
  """C's ``pow`` in double precision (the official code's ``std::pow``); inf on overflow."""
  try:
    return math.pow(base, exponent)
  except OverflowError:
    return math.inf


def schedule(cfg: MatchConfig) -> dict[str, np.ndarray]:
  """Per-level constants, computed in double precision as the official code does.

  ``y_max(l) = (25 / eps) n^phi_l``, ``phi_l = 3^l 2 delta``; ``y_max_ceil`` (an
  integer dual ``y`` has reached ``y_max`` iff ``y >= ceil(y_max)``) and
  ``y_max_int`` (``trunc(y_max)``, the dual a request keeps when it moves up);
  ``divisor(l) = 2 (1 + eps)^2 n^phi_l`` from level ``l`` to ``l + 1``;
  ``count_bound(l) = n^(1 - Phi(l))``, ``Phi(l) = ceil((3^l - 1) / 2 * 2 delta)``.
  """
  n, eps, delta = cfg.num_servers, cfg.eps, cfg.delta
  ls = range(num_levels(cfg))
  phi = [_pow(3, l) * (2 * delta) for l in ls]
  y_max = np.array([(25 / eps) * _pow(n, p) for p in phi])
  clip = lambda x: np.minimum(x, _INT32_MAX).astype(np.int64)  # never reached by int32 duals
  return {
      "y_max": y_max,
      "y_max_ceil": clip(np.ceil(y_max)),
      "y_max_int": clip(np.trunc(y_max)),
      "divisor": np.array([2 * _pow(1 + eps, 2) * _pow(n, p) for p in phi]),
      "count_bound": np.array([_pow(n, 1 - math.ceil(((_pow(3, l) - 1) / 2) * (2 * delta)))
                               for l in ls]),
  }


_CHOICES = {
    "omega_init": ("nearest", "one"),
    "cost_dtype": ("float32", "float64"),
    "top_level": ("stay", "raise"),
    "batch_relabel": ("global", "own"),
}


def cost_dtype(cfg: MatchConfig) -> jnp.dtype:
  """The dtype of coordinates, distances and scaled costs (``cfg.cost_dtype``).

  Raises:
    ValueError: "float64" without 64-bit JAX (it would silently be float32).
  """
  if cfg.cost_dtype == "float64":
    if not jax.config.jax_enable_x64:
      raise ValueError(
          "cost_dtype='float64' needs 64-bit JAX: run jax.config.update('jax_enable_x64', True) "
          "before init (or init and insert inside `with jax.enable_x64(True):`)")
    return jnp.float64
  return jnp.float32


def init_extra(cfg: MatchConfig, xp=jnp) -> PushRelabelState:
  """The initial push-relabel state (validates the options).

  ``xp``: ``jnp`` inside a trace (the omega doubling), ``np`` for :func:`api.init`, which
  puts host arrays on the device instead of compiling a fill program per shape.
  """
  if not (0 < cfg.delta < 1):
    raise ValueError(f"delta must be in (0, 1), got {cfg.delta}")
  if not (0 < cfg.eps <= 1):
    raise ValueError(f"eps must be in (0, 1], got {cfg.eps}")
  if isinstance(cfg.levels, bool) or not isinstance(cfg.levels, int) or cfg.levels < 1:
    raise ValueError(f"levels must be an int >= 1, got {cfg.levels}")
  if (isinstance(cfg.exact_tail, bool) or not isinstance(cfg.exact_tail, int)
      or not 0 <= cfg.exact_tail <= cfg.num_servers):
    raise ValueError(f"exact_tail must be an int in 0..{cfg.num_servers}, got {cfg.exact_tail}")
  for name, accepted in _CHOICES.items():
    value = getattr(cfg, name)
    if not isinstance(value, str) or value not in accepted:
      raise ValueError(f"{name} must be one of {accepted}, got {value!r}")
  big_l = num_levels(cfg)
  return PushRelabelState(
      y_r=xp.zeros((big_l, cfg.capacity), jnp.int32),
      y_s=xp.zeros((big_l, cfg.num_servers), jnp.int32),
      level=xp.zeros((cfg.capacity,), jnp.int32),
      omega=xp.ones((), cost_dtype(cfg)),
      restarts=xp.zeros((), jnp.int32),
      steps=xp.zeros((), jnp.int32),
      rounds=xp.zeros((), jnp.int32),
      fallbacks=xp.zeros((), jnp.int32),
      rows_read=xp.zeros((), jnp.int32),
      tail_servers=xp.zeros((cfg.num_servers,), bool),
      overflowed=xp.zeros((), bool),
  )


def _scaled_level0(cfg: MatchConfig, dist: jax.Array, omega: jax.Array) -> jax.Array:
  """``ceil(2 n d / (eps omega))`` in ``cfg.cost_dtype`` (the C++: ``2 d n / (eps omega)``,
  the same rounding since doubling is exact)."""
  dt = cost_dtype(cfg)
  return jnp.ceil(2.0 * cfg.num_servers * jnp.asarray(dist, dt)
                  / (cfg.eps * jnp.asarray(omega, dt)))


def scaled_costs(cfg: MatchConfig, dist: jax.Array, omega: jax.Array) -> jax.Array:
  """``(L, n)`` integer costs ``d_l`` of one distance row at every level."""
  sched = schedule(cfg)
  d = _scaled_level0(cfg, dist, omega)
  rows = [d]
  for l in range(1, num_levels(cfg)):
    d = jnp.ceil(d / np.asarray(sched["divisor"][l - 1], d.dtype))
    rows.append(d)
  return jnp.minimum(jnp.stack(rows), _BIG).astype(jnp.int32)


def scaled_cost_at(cfg: MatchConfig, dist: jax.Array, omega: jax.Array,
                   level: jax.Array) -> jax.Array:
  """Row ``level`` (traced) of :func:`scaled_costs`, without the ``(L, n)`` stack."""
  sched = schedule(cfg)
  d = _scaled_level0(cfg, dist, omega)
  out = d
  for l in range(1, num_levels(cfg)):
    d = jnp.ceil(d / np.asarray(sched["divisor"][l - 1], d.dtype))
    out = jnp.where(level >= l, d, out)
  return jnp.minimum(out, _BIG).astype(jnp.int32)


class _Loop(NamedTuple):
  request_of: jax.Array  # (n,) holder of each server
  server_of: jax.Array  # (capacity,) server of each request
  pr: PushRelabelState
  free: jax.Array  # the request being placed (-1: done)
  lvl: jax.Array  # its level


def _place(state: MatchState, row: jax.Array) -> MatchState:
  """Places request ``row`` (stored, count not yet incremented) by push-relabel."""
  cfg = state.config
  sched = schedule(cfg)
  y_max_ceil = jnp.asarray(sched["y_max_ceil"], jnp.int32)
  y_max_int = jnp.asarray(sched["y_max_int"], jnp.int32)
  top = num_levels(cfg) - 1
  pr = state.extra
  d = scaled_costs(cfg, distance_row(state, state.requests[row]), pr.omega)
  y0 = jnp.minimum(y_max_int[0], jnp.min(d[0] + 1 - pr.y_s[0]))
  pr = pr._replace(y_r=pr.y_r.at[:, row].set(0).at[0, row].set(y0),
                   level=pr.level.at[row].set(0))

  def body(c: _Loop) -> _Loop:
    # A step writes a few scalars (one dual, one level, one server dual, two matching
    # entries), chosen by a switch over the step's kind and written after it.
    f, l, pr = c.free, c.lvl, c.pr
    yf = pr.y_r[l, f]
    # Most steps run at level 0, where the chain of divisions is not needed. (Without this
    # branch XLA's CPU cost model also split every step's n-wide fusion across the thread
    # pool from n = 2,000 on, a hand-off that cost more than it saved; the insertion
    # programs now compile without that split, api.COMPILER_OPTIONS, but a caller's own
    # jit does not.)
    dist_f = distance_row(state, state.requests[f])
    dl = jax.lax.cond(l == 0, lambda: scaled_cost_at(cfg, dist_f, pr.omega, 0),
                      lambda: scaled_cost_at(cfg, dist_f, pr.omega, l))
    holder = c.request_of
    is_free = holder < 0
    eligible = is_free | (pr.level[jnp.maximum(holder, 0)] >= l)
    slack = dl - yf - pr.y_s[l]
    adm = eligible & (slack == -1)
    # One search for the server: the first admissible free one, else the first admissible
    # one (0 if none), as one min over n + n ranks (each n-wide reduction recomputes the
    # scaled costs, so this is cheaper than two any's and two first_index's).
    n = cfg.num_servers
    pos = jnp.arange(n, dtype=jnp.int32)
    key = jnp.min(jnp.where(adm, jnp.where(is_free, pos, n + pos), 2 * n))
    has_any = key < 2 * n
    s = jnp.where(key < n, key, jnp.where(has_any, key - n, 0))

    # The step: 0 move up (the dual hit y_max(l): it keeps trunc(y_max(l)), continues one
    # level up), 1 push (match f to s; the evicted holder, if any, continues at its level),
    # 2 relabel (raise y(f) until an eligible edge becomes admissible), 3 overflow
    # (top_level="raise": past the top level the C++ code exits; stop, flag).
    at_max = yf >= y_max_ceil[l]  # y >= y_max(l), exactly
    step = jnp.where(has_any, 1, 2)
    if cfg.top_level == "raise":
      branch = jnp.where(at_max, jnp.where(l < top, 0, 3), step)
    else:
      branch = jnp.where(at_max & (l < top), 0, step)  # "stay": the top level keeps going
    evicted = holder[s]
    e = jnp.maximum(evicted, 0)

    # Each kind returns the scalars it writes: (y_l(f), level(f), y_l(s), holder of s,
    # server of e, server of f, next free request, its level), e = the evicted holder or 0
    # (then rewritten unchanged). Reading them inside the switch orders every read of the
    # carry before the writes below, so XLA updates the carry in place; branches that
    # returned the whole carry made it copy the dual tables and matching arrays every step.
    def unchanged():
      return (yf, pr.level[f], pr.y_s[l, s], evicted, c.server_of[e], c.server_of[f], f, l)

    def move_up():
      return (y_max_int[l], l + 1) + unchanged()[2:7] + (l + 1,)

    def push():  # f held no server, so f != e whenever e is evicted
      nxt = jnp.where(evicted >= 0, pr.level[e], l)
      return (yf, pr.level[f], pr.y_s[l, s] - 1, f,
              jnp.where(evicted >= 0, -1, c.server_of[e]), s, evicted, nxt)

    def relabel():  # raise y(f) until an eligible edge becomes admissible
      min_slack = jnp.min(jnp.where(eligible, slack, _BIG))
      return (yf + (min_slack + 1),) + unchanged()[1:]

    def overflow():
      return unchanged()[:6] + (jnp.int32(-1), l)

    kinds = (move_up, push, relabel, overflow)[:4 if cfg.top_level == "raise" else 3]
    v = jax.lax.switch(branch, kinds)
    put = lambda a, i, x: jax.lax.dynamic_update_slice(a, jnp.reshape(x, (1,) * a.ndim), i)
    pr = pr._replace(y_r=put(pr.y_r, (l, f), v[0]), level=put(pr.level, (f,), v[1]),
                     y_s=put(pr.y_s, (l, s), v[2]), steps=pr.steps + 1,
                     overflowed=pr.overflowed | (branch == 3))
    request_of = put(holder, (s,), v[3])
    server_of = put(put(c.server_of, (e,), v[4]), (f,), v[5])
    free, lvl = v[6], v[7]
    return _Loop(request_of, server_of, pr, free, lvl)

  init = _Loop(state.request_of, state.server_of, pr, row, jnp.int32(0))
  out = jax.lax.while_loop(lambda c: (c.free >= 0) & ~c.pr.overflowed, body, init)
  return state.replace(request_of=out.request_of, server_of=out.server_of, extra=out.pr)


def _count_limits(cfg: MatchConfig) -> jax.Array:
  """``(L,)`` the most requests level ``l`` or above may hold: ``floor(n^(1 - Phi(l)))``
  (an integer count is <= the bound iff it is <= its floor, exact in any dtype)."""
  return jnp.asarray(np.floor(schedule(cfg)["count_bound"]), jnp.int32)


def _level_counts(state: MatchState, count: jax.Array) -> jax.Array:
  """``(L,)`` how many of the first ``count`` requests are at level ``l`` or above."""
  cfg = state.config
  live = jnp.arange(cfg.capacity) < count
  lv = jnp.where(live, state.extra.level, -1)
  return jnp.sum(lv[None, :] >= jnp.arange(num_levels(cfg))[:, None], axis=1, dtype=jnp.int32)


def _omega_ok(state: MatchState, count: jax.Array) -> jax.Array:
  return jnp.all(_level_counts(state, count) <= _count_limits(state.config))


def _reset_doubled(state: MatchState) -> MatchState:
  """Everything unmatched and every dual zero, with omega doubled (counters kept)."""
  cfg = state.config
  old = state.extra
  pr = init_extra(cfg)._replace(omega=old.omega * 2, restarts=old.restarts + 1,
                                 steps=old.steps, rounds=old.rounds, fallbacks=old.fallbacks,
                                 rows_read=old.rows_read,
                                 tail_servers=old.tail_servers, overflowed=old.overflowed)
  return state.replace(
      server_of=jnp.full_like(state.server_of, -1), request_of=jnp.full_like(state.request_of, -1),
      extra=pr)


def _start_free(state: MatchState, rows: jax.Array, valid: jax.Array) -> MatchState:
  """Requests ``rows[valid]`` start free at level 0 with their initial duals (computed
  together, against the server duals before any of them is matched)."""
  cfg, pr = state.config, state.extra
  idx = jnp.where(valid, rows, cfg.capacity)
  y0 = jax.vmap(lambda r: _initial_dual(state, r))(jnp.minimum(rows, cfg.capacity - 1))
  return state.replace(extra=pr._replace(
      y_r=pr.y_r.at[:, idx].set(0, mode="drop").at[0, idx].set(y0, mode="drop"),
      level=pr.level.at[idx].set(0, mode="drop")))


def insert_push_relabel(state: MatchState, row: jax.Array) -> MatchState:
  """Inserts the request stored at ``row`` (= ``state.count``).

  With ``top_level="raise"`` an insertion during which a dual passes the top
  level leaves the state as it was before it (the request stays stored at
  ``row``), with ``extra.overflowed`` set; the API then skips every later
  insertion (``api._insert_unchecked``).
  """
  cfg = state.config
  cost_dtype(cfg)  # raises while tracing if "float64" lacks 64-bit JAX
  if cfg.exact_tail:
    in_tail = (cfg.num_servers - state.count) <= cfg.exact_tail
    return jax.lax.cond(in_tail, _insert_tail, _insert_main, state, row)
  return _insert_main(state, row)


def _first_omega(state: MatchState, row: jax.Array) -> MatchState:
  """Sets omega from the first request: a lower bound on OPT (see module doc).

  With ``omega_init="one"`` omega keeps its initial 1, as in the official code.
  """
  cfg = state.config
  if cfg.omega_init == "one":
    return state

  def from_row(state):
    d = distance_row(state, state.requests[row])
    nearest = jnp.min(d)
    positive = jnp.min(jnp.where(d > 0, d, jnp.inf))
    omega = jnp.where(nearest > 0, nearest, jnp.where(jnp.isfinite(positive), positive, 1.0))
    return state.replace(extra=state.extra._replace(omega=omega.astype(cost_dtype(cfg))))

  return jax.lax.cond(state.count == 0, from_row, lambda s: s, state)


class _Placements(NamedTuple):
  """Loop state of :func:`_insert_main`: the request placed next and whether all are placed."""

  state: MatchState
  row: jax.Array
  done: jax.Array


def _insert_main(state: MatchState, row: jax.Array) -> MatchState:
  """Places ``row``; then the official code's do-while: while the count check fails (and no
  dual passed the top level, with ``top_level="raise"``), omega doubles and requests
  0..row are re-inserted one by one in arrival order.

  One loop places both the new request and the re-inserted ones (after a failed check it
  starts again at row 0): one copy of the placement in the program instead of two, which
  compiles faster, with the same steps in the same order.
  """
  before = state
  state = _first_omega(state, row)
  count = state.count + 1

  def place(c: _Placements) -> _Placements:
    s = _place(c.state, c.row)
    last = c.row == row  # every request is placed: the omega check
    redo = last & ~s.extra.overflowed & ~jax.lax.cond(
        last, _omega_ok, lambda s, count: jnp.bool_(True), s, count)
    s = jax.lax.cond(redo, _reset_doubled, lambda s: s, s)
    return _Placements(s, jnp.where(redo, 0, c.row + 1), last & ~redo)

  state = jax.lax.while_loop(lambda c: ~c.done, place,
                             _Placements(state, row, jnp.bool_(False))).state
  state = state.replace(count=count)
  if state.config.top_level == "raise":  # undo the whole insertion, keep the flag
    undone = before.replace(extra=before.extra._replace(overflowed=jnp.ones((), bool)))
    state = jax.tree.map(lambda a, b: jnp.where(state.extra.overflowed, a, b), undone, state)
  return state


def _insert_tail(state: MatchState, row: jax.Array) -> MatchState:
  """Exact augmenting path among the servers free when the tail began."""
  pr = state.extra
  tail = jnp.where(jnp.any(pr.tail_servers), pr.tail_servers, state.request_of < 0)
  state = state.replace(extra=pr._replace(tail_servers=tail))
  return insert_exact(state, row, column_mask=tail)


class _Round(NamedTuple):
  """Loop state of :func:`_parallel_rounds`."""

  request_of: jax.Array
  server_of: jax.Array
  pr: PushRelabelState
  rounds: jax.Array  # rounds run in this batch
  slots: jax.Array  # (width,) the free requests, in any order; capacity marks an empty slot
  key_first: jax.Array  # the first round of the key block
  keys: jax.Array  # (_KEY_BLOCK + 1, 4) uint32 key words of rounds key_first .. + _KEY_BLOCK
  waiting: jax.Array  # (width,) bool: on CPU, slots known to have no admissible edge ...
  wait_level: jax.Array  # ... at this level (see ``body_cpu`` in _parallel_rounds)
  held_at: jax.Array  # (n,) int32 the level of each server's holder (top + 1: free)
  above: jax.Array  # (L,) int32 requests stored so far at level l or above


class _RoundInputs(NamedTuple):
  """The parts of a parallel round that do not depend on its gather width."""

  level: jax.Array  # the lowest level holding a free request
  here: jax.Array  # (width,) bool: the slots holding a free request at that level
  eligible: jax.Array  # (n,) bool: servers free or held at a level >= it
  scale0: jax.Array  # 2 n / (eps omega)


# Round keys are drawn this many at a time (a threefry fold_in and split per round, as
# scalar ops, cost more than a small round's arithmetic); a block holds one key more, for
# the round that follows a relabel inside the same loop step (see ``cpu_round``).
_KEY_BLOCK = 32
# False: every round calls round_proposals (the kernel, or its jnp reference on CPU)
# instead of the CPU form below; the same trajectory, bit for bit (tested).
_CPU_FORM = True
# True: the rounds stop as soon as more requests sit at some level or above than the omega
# check allows (levels only rise, so the check at the end of the batch would fail: omega
# doubles and the requests are re-inserted from the state that the stop discards). False:
# the rounds run until every request is matched, as the paper's code does, and the check
# at the end fails the same way; the same states after every batch, bit for bit (tested),
# more rounds counted.
_STOP_EARLY = True
# On CPU a round's random priorities are computed only for the rows with an admissible
# edge, gathered into this many rows when they fit (most rounds: most rows read have none).
# The same choices (a priority depends on the request id and the column, not the position);
# a smaller fusion (which XLA's CPU cost model also does not split across threads, where the
# split is on: in a caller's own jit; api.COMPILER_OPTIONS turns it off).
_FEW = 4


def _gather_widths(width: int) -> tuple[int, ...]:
  """Gather widths of a round: the powers of two below the batch width, then the width."""
  return tuple(1 << k for k in range(width.bit_length()) if 1 << k < width) + (width,)


# On CPU, for batches wider than _BLOCKED_FROM, a round that gathers more than _BLOCK rows
# computes its slacks and priorities in blocks of _BLOCK rows, in a loop over the blocks
# that hold rows: fewer than _BLOCK padded rows are read instead of up to half the power of
# two the rows are padded to. Narrower batches waste few rows that way and ran slower with
# the loop (n = 1,000-2,000, widths 50-100), so they keep the powers of two.
_BLOCK = 16
_BLOCKED_FROM = 128


def _row_stats(slack: jax.Array, ok: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Each row's minimum slack over its ``ok`` (eligible) edges (``_BIG`` if none), and
  whether one of them is admissible (slack -1)."""
  return jnp.min(jnp.where(ok, slack, _BIG), axis=1), jnp.any(ok & (slack == -1), axis=1)


def _over_blocks(count: jax.Array, body, init):
  """``body(start, acc)`` for ``start = 0, _BLOCK, ...`` below ``count`` (traced): a loop
  over the blocks of ``_BLOCK`` rows that hold the first ``count`` rows."""
  blocks = (count + _BLOCK - 1) // _BLOCK
  return jax.lax.fori_loop(0, blocks, lambda b, acc: body(b * _BLOCK, acc), init)


def _cpu_gather_widths(width: int) -> tuple[int, ...]:
  """CPU gather widths: those of :func:`_gather_widths`, or for a batch wider than
  ``_BLOCKED_FROM`` the powers of two up to ``_BLOCK``, then the batch width rounded up to
  a multiple of ``_BLOCK`` (a blocked round)."""
  if width <= _BLOCKED_FROM:
    return _gather_widths(width)
  return _gather_widths(_BLOCK) + (-(-width // _BLOCK) * _BLOCK,)


def _initial_dual(state: MatchState, row: jax.Array) -> jax.Array:
  """``y_0(r) = min(y_max(0), min_s d_0(r, s) + 1 - y_0(s))`` for a new request."""
  cfg, pr = state.config, state.extra
  d = scaled_cost_at(cfg, distance_row(state, state.requests[row]), pr.omega, 0)
  return jnp.minimum(jnp.int32(schedule(cfg)["y_max_int"][0]), jnp.min(d + 1 - pr.y_s[0]))


def _round_keys(base_key: jax.Array, first: jax.Array) -> jax.Array:
  """``(_KEY_BLOCK + 1, 4)`` key words of rounds ``first .. first + _KEY_BLOCK``: proposal
  words, acceptance words.

  Round ``r``'s key is ``fold_in(base_key, r)``, split into the proposals' and the
  acceptances' keys; each gives its first and last key word.
  """
  def one(r):
    k_prop, k_acc = jax.random.split(jax.random.fold_in(base_key, r))
    words = jax.random.key_data(k_prop).reshape(-1)
    kw = jax.random.key_data(k_acc).reshape(-1)
    return jnp.stack([words[0], words[-1], kw[0], kw[-1]])

  return jax.vmap(one)(first + jnp.arange(_KEY_BLOCK + 1, dtype=jnp.int32))


def _parallel_rounds(state: MatchState, rows: jax.Array, valid: jax.Array,
                     count: jax.Array) -> tuple[MatchState, jax.Array]:
  """Rounds over the free requests ``rows[valid]`` until every one is matched
  (``count``: the requests stored so far, which keys the rounds' random choices).

  A round works at the lowest level ``l`` holding a free request and gathers
  the free requests there (at most the batch width: a batch never has more
  free requests; evictions replace matched ones). If none has an admissible
  edge, all their duals rise by the global minimum slack + 1 (requests
  crossing ``y_max(l)`` move up); else every one of them proposes to a random
  admissible server (:func:`kernels_pallas.matching.round_proposals`), each
  server accepts one random proposer, the matches apply at once and evicted
  holders go free.

  Every request before ``rows`` is matched when this starts (earlier chunks ran to
  completion, or an omega doubling started over at row 0), so the free requests are
  kept in a slot list of the batch's width: a round reads those slots, not every stored
  request, and nothing in a round is capacity-wide.

  Returns the state and ``(L,)`` how many of the first ``count`` requests sit at each
  level or above (the omega check's counts, kept up to date as requests move up). With
  ``_STOP_EARLY`` the rounds stop as soon as a count passes its bound: levels only rise
  until omega doubles, so the check at the end would fail; the caller doubles omega and
  starts over, and the state the stop leaves (requests still free) is discarded.
  """
  cfg = state.config
  sched = schedule(cfg)
  width = rows.shape[0]
  y_max = jnp.asarray(sched["y_max"], jnp.float32)
  top = num_levels(cfg) - 1
  divisors = tuple(float(x) for x in sched["divisor"][:-1])
  base_key = jax.random.fold_in(jax.random.key(cfg.seed), count)
  limits = _count_limits(cfg)

  def over(c: _Round) -> jax.Array:
    """Whether the rounds stop early: more requests at some level or above than allowed."""
    return jnp.any(c.above > limits) & _STOP_EARLY

  def round_inputs(c: _Round) -> _RoundInputs:
    """What a round needs that does not depend on how many rows it gathers."""
    filled = c.slots < cfg.capacity
    slot_level = c.pr.level[jnp.minimum(c.slots, cfg.capacity - 1)]
    l = jnp.min(jnp.where(filled, slot_level, top + 1))
    here = filled & (slot_level == l)
    eligible = c.held_at >= l
    scale0 = 2.0 * cfg.num_servers / (cfg.eps * c.pr.omega)
    return _RoundInputs(l, here, eligible, scale0)

  def key_words(c: _Round, ahead: jax.Array | int = 0):
    """The proposal and acceptance key words of round ``c.rounds + ahead``."""
    words = c.keys[c.rounds - c.key_first + ahead]
    return (words[0], words[1]), (words[2], words[3])

  def round_at(c: _Round, inputs: _RoundInputs, gather: int,
               active: jax.Array | None = None) -> _Round:
    """One loop step, gathering the (at most ``gather``) free requests of the lowest level:
    one round, or on CPU a relabel round and the round after it. With ``active`` (CPU
    only) it gathers those slots instead and runs a push round if one of them has an
    admissible edge, else nothing (no round)."""
    pr = c.pr
    l = inputs.level
    pos = jnp.nonzero(inputs.here if active is None else active, size=gather,
                      fill_value=width)[0]
    rows = jnp.where(pos < width, c.slots[jnp.minimum(pos, width - 1)], cfg.capacity)
    ok_row = rows < cfg.capacity
    rows_c = jnp.minimum(rows, cfg.capacity - 1)
    y_r = pr.y_r[l, rows_c]
    # A wide gather of a wide batch: on CPU (cpu_round only) its n-wide work runs in blocks
    # of _BLOCK rows, and its acceptances per server (n wide) instead of over gather x gather
    # pairs. The kernel form (kernel_round) keeps the pairs.
    blocked = width > _BLOCKED_FROM and gather > _BLOCK

    def slack_of(ids: jax.Array, y: jax.Array, level0: bool) -> jax.Array:
      """``(k, n)`` slacks at level ``l`` of the requests ``ids`` with duals ``y``."""
      d = jax.vmap(lambda i: distance_row(state, state.requests[i]))(ids)
      cost = scaled_cost(d, l, inputs.scale0, () if level0 else divisors)
      return cost - y[:, None] - pr.y_s[l][None, :]

    def at_level(fn):
      """``fn(level0)`` in a branch per case: most rounds run at level 0, where the chain
      of divisions is not needed."""
      return jax.lax.cond(l == 0, lambda: fn(True), lambda: fn(False))

    def raise_duals(c: _Round, m: jax.Array) -> tuple[_Round, jax.Array]:
      """Every gathered dual rises by ``m + 1`` (``m``: the minimum eligible slack, or per
      row its own with ``batch_relabel="own"``); also returns which gathered rows crossed
      ``y_max(l)`` and moved up."""
      idx = jnp.where(ok_row, rows, cfg.capacity)
      y_r = c.pr.y_r.at[l, idx].add(m + 1, mode="drop")
      up = ok_row & (y_r[l, rows_c].astype(jnp.float32) >= y_max[l]) & (l < top)
      up_idx = jnp.where(up, rows, cfg.capacity)
      y_r = y_r.at[l, up_idx].set(y_max[l].astype(jnp.int32), mode="drop")
      level = c.pr.level.at[up_idx].add(1, mode="drop")
      above = c.above.at[l + 1].add(jnp.sum(up, dtype=jnp.int32), mode="drop")
      return c._replace(pr=c.pr._replace(y_r=y_r, level=level), above=above), up

    def push(c: _Round, choice: jax.Array, accept_words, per_server: bool = False) -> _Round:
      # Each chosen server accepts the proposer with the largest random priority; equal
      # priorities go to the lowest request id, so exactly one wins. Pairwise over the
      # gathered rows (gather x gather), not per server: nothing n-wide.
      proposing = choice >= 0
      prio = jnp.where(proposing, hash_bits(rows_c.astype(jnp.uint32), *accept_words) | 1,
                       0)
      if not per_server:
        rival = (proposing[None, :] & (choice[None, :] == choice[:, None])
                 & ((prio[None, :] > prio[:, None])
                    | ((prio[None, :] == prio[:, None]) & (rows[None, :] < rows[:, None]))))
        accepted = proposing & ~jnp.any(rival, axis=1)
      else:  # per server, n wide, instead of gather x gather pairs
        n = cfg.num_servers
        at = jnp.minimum(choice, n - 1)
        best = jnp.zeros(n, jnp.uint32).at[jnp.where(proposing, choice, n)].max(
            prio.astype(jnp.uint32), mode="drop")
        top_prio = proposing & (prio.astype(jnp.uint32) == best[at])
        lowest = jnp.full(n, cfg.capacity, jnp.int32).at[jnp.where(top_prio, choice, n)].min(
            rows, mode="drop")
        accepted = top_prio & (lowest[at] == rows)
      srv = jnp.where(accepted, choice, cfg.num_servers)  # distinct for accepted rows
      evicted = jnp.where(accepted, c.request_of[jnp.minimum(choice, cfg.num_servers - 1)], -1)
      server_of = c.server_of.at[jnp.where(evicted >= 0, evicted, cfg.capacity)].set(
          -1, mode="drop")
      server_of = server_of.at[jnp.where(accepted, rows, cfg.capacity)].set(srv, mode="drop")
      request_of = c.request_of.at[srv].set(rows, mode="drop")
      held_at = c.held_at.at[srv].set(l, mode="drop")
      y_s = c.pr.y_s.at[l, srv].add(-1, mode="drop")
      # An accepted request leaves its slot to the request it evicted (if any).
      slots = c.slots.at[pos].set(
          jnp.where(accepted, jnp.where(evicted >= 0, evicted, cfg.capacity), rows), mode="drop")
      return c._replace(request_of=request_of, server_of=server_of, slots=slots,
                        held_at=held_at, pr=c.pr._replace(y_s=y_s))

    def kernel_round(c: _Round) -> tuple[_Round, jax.Array]:
      proposal_words, accept_words = key_words(c)
      dist = jax.vmap(lambda i: distance_row(state, state.requests[i]))(rows_c)
      choice, min_slack = round_proposals(
          dist, y_r, pr.y_s[l], inputs.eligible, ok_row, rows_c, l, inputs.scale0,
          proposal_words, divisors)
      m = (min_slack if cfg.batch_relabel == "own"
           else jnp.min(jnp.where(ok_row, min_slack, _BIG)))
      c = jax.lax.cond(jnp.any(choice >= 0), lambda c: push(c, choice, accept_words),
                       lambda c: raise_duals(c, m)[0], c)
      return c, jnp.int32(1)

    def cpu_round(c: _Round) -> tuple[_Round, jax.Array]:
      # round_proposals' jnp reference computes the random priorities of every row and
      # column, and the minimum slack, in every round; here the slacks come first, then
      # only what the round's kind uses: the priorities (among admissible edges) when
      # there is an admissible edge, else the minimum slack. The same results.
      ok = inputs.eligible[None, :] & ok_row[:, None]
      # Each row's minimum eligible slack (the relabel's), and whether it has an admissible
      # edge. Not "minimum == -1": in exact arithmetic eligible slacks stay >= -1, but a new
      # request's dual comes from _initial_dual's cost formula, which float32 may round one
      # above these costs, so a slack of -2 can occur (tested).
      if not blocked:
        slack = at_level(lambda level0: slack_of(rows_c, y_r, level0))
        row_min, has = _row_stats(slack, ok)
      else:
        # The gathered rows come first (nonzero keeps order): the blocks that hold them.
        def block(level0: bool, start, acc):
          take = lambda a: jax.lax.dynamic_slice_in_dim(a, start, _BLOCK)  # noqa: E731
          ok_b = inputs.eligible[None, :] & take(ok_row)[:, None]
          stats = _row_stats(slack_of(take(rows_c), take(y_r), level0), ok_b)
          return tuple(jax.lax.dynamic_update_slice_in_dim(a, x, start, 0)
                       for a, x in zip(acc, stats, strict=True))

        row_min, has = at_level(lambda level0: _over_blocks(
            jnp.sum(ok_row), functools.partial(block, level0),
            (jnp.full(gather, _BIG), jnp.zeros(gather, bool))))

      def relabel(c: _Round):
        # A relabel round. The round after it works at the same level on the same rows,
        # less those that moved up (the lowest level still holds the others; a relabel
        # changes no server, so no eligibility), with every slack lowered by m + 1: its
        # admissible edges are the minimum-slack edges of the rows that stayed. So it runs
        # in this loop step, with its own key, and saves a gather: the same two rounds.
        # With batch_relabel="own" each row rises by its own minimum slack + 1 instead, and
        # then every row that stayed proposes along its minimum-slack edges.
        m = row_min if cfg.batch_relabel == "own" else jnp.min(row_min)
        c, up = raise_duals(c, m)
        m = jnp.broadcast_to(m, (gather,))
        # If the relabel moved a request up past the omega check's bound, the rounds stop
        # after it (as the loop does after any round): no round after it.
        return c, ok_row & ~up & (row_min == m) & ~over(c), up, jnp.int32(1), m

      no_up = jnp.zeros(gather, bool)
      minus_one = jnp.full(gather, -1, jnp.int32)
      if active is None:
        c, has, up, relabeled, target = jax.lax.cond(
            jnp.any(has), lambda c: (c, has, no_up, jnp.int32(0), minus_one), relabel, c)
      else:
        up, relabeled, target = no_up, jnp.int32(0), minus_one
      proposal_words, accept_words = key_words(c, relabeled)
      # Rows read that stay at this level without an admissible edge wait (body_cpu). A slot
      # whose request is accepted (it had an edge) is cleared here before push refills it.
      c = c._replace(waiting=c.waiting.at[pos].set(ok_row & ~up & ~has, mode="drop"))
      # The rows that propose (``has``) choose among their admissible edges: slack
      # ``target`` (per row) when the round began (-1, or m before the relabel).
      def choose(adm_rows: jax.Array, ids: jax.Array) -> jax.Array:
        """Each row's random admissible server (-1 if none): the largest priority, the
        lowest column among equal ones."""
        n = cfg.num_servers
        cols = jnp.arange(n, dtype=jnp.int32)[None, :]
        flat = ids.astype(jnp.uint32)[:, None] * jnp.uint32(n) + cols.astype(jnp.uint32)
        prio = jnp.where(adm_rows, hash_bits(flat, *proposal_words) | jnp.uint32(1),
                         jnp.uint32(0))
        best = jnp.max(prio, axis=1, keepdims=True)
        arg = jnp.min(jnp.where(prio == best, cols, _BIG), axis=1)
        return jnp.where(best[:, 0] > 0, arg, -1)

      def choose_at(at: jax.Array, valid: jax.Array, level0: bool) -> jax.Array:
        """``choose`` for the gathered rows ``at`` (``valid`` ones), slacks recomputed."""
        adm_rows = (inputs.eligible[None, :] & valid[:, None]
                    & (slack_of(rows_c[at], y_r[at], level0) == target[at][:, None]))
        return choose(adm_rows, rows_c[at])

      def proposals(c: _Round) -> _Round:
        # The priorities of the rows with an admissible edge only, when they fit in _FEW.
        if gather <= _FEW:
          return push(c, choose(ok & has[:, None] & (slack == target[:, None]), rows_c),
                      accept_words, blocked)

        def few(_):
          sel = jnp.nonzero(has, size=_FEW, fill_value=gather)[0]
          at = jnp.minimum(sel, gather - 1)
          if blocked:
            sub = at_level(functools.partial(choose_at, at, sel < gather))
          else:
            sub = choose(ok[at] & (sel < gather)[:, None]
                         & (slack[at] == target[at][:, None]), rows_c[at])
          return jnp.full(gather, -1, jnp.int32).at[sel].set(sub, mode="drop")

        def many(_):
          if not blocked:
            return choose(ok & has[:, None] & (slack == target[:, None]), rows_c)
          # The proposing rows first, in blocks.
          order = jnp.nonzero(has, size=gather, fill_value=gather)[0]

          def block(level0: bool, start, choice):
            sel = jax.lax.dynamic_slice_in_dim(order, start, _BLOCK)
            sub = choose_at(jnp.minimum(sel, gather - 1), sel < gather, level0)
            return choice.at[sel].set(sub, mode="drop")

          return at_level(lambda level0: _over_blocks(
              jnp.sum(has), functools.partial(block, level0), jnp.full(gather, -1, jnp.int32)))

        choice = jax.lax.cond(jnp.sum(has) <= _FEW, few, many, None)
        return push(c, choice, accept_words, blocked)

      proposed = jnp.any(has)
      c = jax.lax.cond(proposed, proposals, lambda c: c, c)
      return c, relabeled + proposed.astype(jnp.int32)

    if active is not None:
      c, ran = cpu_round(c)
    else:
      c, ran = (jax.lax.platform_dependent(c, cpu=cpu_round, default=kernel_round)
                if _CPU_FORM else kernel_round(c))
    return c._replace(rounds=c.rounds + ran, pr=c.pr._replace(
        steps=c.pr.steps + ran, rows_read=c.pr.rows_read + jnp.sum(ok_row, dtype=jnp.int32)))

  # A round's work is (rows gathered) x n. Late in a batch few requests are free (eviction
  # chains), so a round gathers into the smallest power of two (or the batch width) that
  # holds them: the same round (the random choices depend on request ids, not positions),
  # at a fraction of the work of padding to the batch width. Only the gathering part is in
  # the branches (one copy per width); the rest is computed once per round.
  widths = _gather_widths(width)

  def gathered(c: _Round, inputs: _RoundInputs, mask: jax.Array, widths=widths,
               **kw) -> _Round:
    """:func:`round_at` with the narrowest gather width that holds the slots of ``mask``."""
    if len(widths) == 1:
      return round_at(c, inputs, widths[0], **kw)
    num = jnp.sum(mask)
    which = sum((num > b).astype(jnp.int32) for b in widths[:-1])
    return jax.lax.switch(which, [functools.partial(round_at, gather=b, **kw) for b in widths],
                          c, inputs)

  cpu_widths = _cpu_gather_widths(width)

  def body_all(c: _Round) -> _Round:
    """A round over every free request of the lowest level (and on CPU, after a relabel,
    the round after it)."""
    inputs = round_inputs(c)
    return gathered(c, inputs, inputs.here)

  def body_cpu(c: _Round) -> _Round:
    """The same rounds, reading fewer rows. Between two relabels at a level, a push round
    only raises slacks (an accepting server's dual falls; no dual of a request changes, and
    a server taken by a request of this level stays eligible) and the level only rises, so
    a request read without an admissible edge has none until the next relabel: it only
    waits. A push round's proposals come from the other requests alone, so this step first
    gathers those (``waiting`` marks the rest, valid at ``wait_level``); only if none of
    them has an admissible edge does it gather every free request of the level, for the
    relabel round (whose minimum slack needs them all) and the round after it. The same
    rounds, keys and results (the random choices depend on request ids, not positions)."""
    inputs = round_inputs(c)
    l = inputs.level
    c = c._replace(waiting=c.waiting & (c.wait_level == l), wait_level=l)
    active = inputs.here & ~c.waiting
    tried = jax.lax.cond(
        jnp.any(active), lambda c: gathered(c, inputs, active, cpu_widths, active=active),
        lambda c: c, c)
    return jax.lax.cond(tried.rounds > c.rounds, lambda t: t,
                        lambda t: gathered(t, inputs, inputs.here, cpu_widths), tried)

  def body(c: _Round) -> _Round:
    # A key block covers this step's rounds (at most two: a relabel and the round after it).
    fresh = c.rounds >= c.key_first + _KEY_BLOCK
    c = c._replace(key_first=jnp.where(fresh, c.rounds, c.key_first),
                   keys=jax.lax.cond(fresh, lambda: _round_keys(base_key, c.rounds),
                                     lambda: c.keys))
    if not _CPU_FORM:
      return body_all(c)
    return jax.lax.platform_dependent(c, cpu=body_cpu, default=body_all)

  slots = jnp.where(valid, rows, cfg.capacity).astype(jnp.int32)
  # A holder's level never changes while it holds (only free requests move up), so a
  # server's eligibility at level l, ``held_at >= l``, is kept up to date by the pushes
  # instead of gathered from the holders' levels in every round.
  holder = state.request_of
  held_at = jnp.where(holder >= 0, state.extra.level[jnp.maximum(holder, 0)], top + 1)
  init = _Round(state.request_of, state.server_of, state.extra, jnp.int32(0), slots,
                jnp.int32(-_KEY_BLOCK), jnp.zeros((_KEY_BLOCK + 1, 4), jnp.uint32),
                jnp.zeros(width, bool), jnp.int32(-1), held_at, _level_counts(state, count))
  out = jax.lax.while_loop(lambda c: jnp.any(c.slots < cfg.capacity) & ~over(c), body, init)
  pr = out.pr._replace(rounds=out.pr.rounds + out.rounds)
  return state.replace(request_of=out.request_of, server_of=out.server_of, extra=pr), out.above


def insert_batch_push_relabel(state: MatchState, requests: jax.Array) -> MatchState:
  """Inserts a batch with the paper's parallel rounds (see :func:`_parallel_rounds`).

  New requests start free at level 0 with ``y_0(r) = min(y_max(0), min_s d_0 +
  1 - y_0(s))``. After the rounds the omega check runs; if it fails, omega
  doubles and every request is re-inserted in arrival order by the same parallel
  rounds, ``len(requests)`` at a time (:func:`_rounds_batch`), until the check
  holds. The rounds stop as soon as the check is bound to fail (more requests at some
  level or above than it allows; levels only rise): the same states as checking at the
  end. ``extra.rounds`` counts every round run, re-insertions included, and
  ``extra.rows_read`` the requests the rounds gathered, each to compute its slacks
  to every server (the work a sequential step does for one request), each time it
  is gathered, padding excluded. On CPU a loop step may gather twice (the requests
  that may propose, then every one of the level for a relabel), and a wide batch
  computes its proposing requests' slacks once more to choose (not counted). With
  ``exact_tail`` the requests past the tail start are inserted one by one, the
  only sequential fallback (counted in ``extra.fallbacks``).

  ``omega_init`` applies as in the sequential algorithm; ``cost_dtype`` and
  ``top_level`` must keep their defaults ("float32": the kernel's scaled costs
  are float32; "stay"), since their other values reproduce the sequential C++
  code: a ValueError otherwise.
  """
  cfg = state.config
  if cfg.batch_relabel not in _CHOICES["batch_relabel"]:
    raise ValueError(f"batch_relabel must be one of {_CHOICES['batch_relabel']}, "
                     f"got {cfg.batch_relabel!r}")
  if cfg.cost_dtype != "float32" or cfg.top_level != "stay":
    raise ValueError(
        "insert_batch (the parallel rounds) supports cost_dtype='float32' and top_level='stay' "
        f"only, got cost_dtype={cfg.cost_dtype!r}, top_level={cfg.top_level!r}: those options "
        "reproduce the official sequential C++ code, so insert with insert or insert_many")
  width = requests.shape[0]
  start = state.count
  count = start + width
  rows = start + jnp.arange(width)
  state = state.replace(requests=jax.lax.dynamic_update_slice_in_dim(
      state.requests, requests.astype(state.requests.dtype), start, axis=0))
  if cfg.exact_tail:
    in_tail = (cfg.num_servers - count) < cfg.exact_tail
    return jax.lax.cond(in_tail, _sequential_batch, _rounds_batch, state, rows, count)
  return _rounds_batch(state, rows, count)


class _Chunks(NamedTuple):
  """Loop state of :func:`_rounds_batch`: the chunk placed next and whether all are placed."""

  state: MatchState
  first: jax.Array  # the chunk's first row
  done: jax.Array


def _rounds_batch(state: MatchState, rows: jax.Array, count: jax.Array) -> MatchState:
  """The new requests ``rows`` by parallel rounds, then the omega check; while it fails,
  omega doubles and requests 0..count-1 are re-inserted in arrival order, ``width`` at a
  time, each chunk placed by parallel rounds among the requests re-inserted so far.

  One loop over chunks of rows ``[first, min(first + width, count))`` runs both: the new
  requests are the chunk at ``first = start``, and after a failed check the chunks start
  again at row 0. A chunk whose rounds stop early (the check is already bound to fail,
  see :func:`_parallel_rounds`) starts over at once: the same states as running every
  chunk to the end and failing the check there, with fewer rounds. One placement by
  rounds in the program instead of two (the first insertion, then the re-insertions,
  nested in two more loops) compiles in well under half the time, with the same steps in
  the same order.
  """
  width = rows.shape[0]
  state = _first_omega(state, rows[0])

  def chunk(c: _Chunks) -> _Chunks:
    rows = c.first + jnp.arange(width)
    end = jnp.minimum(c.first + width, count)
    s, above = _parallel_rounds(_start_free(c.state, rows, rows < end), rows, rows < end, end)
    last = end >= count  # every request is placed: the omega check (on the last chunk the
    # counts cover all count requests, as _omega_ok's do); a stop (a count past its bound
    # before the last chunk) doubles omega at once
    redo = jnp.any(above > _count_limits(s.config)) & (last | _STOP_EARLY)
    s = jax.lax.cond(redo, _reset_doubled, lambda s: s, s)
    return _Chunks(s, jnp.where(redo, 0, end), last & ~redo)

  out = jax.lax.while_loop(lambda c: ~c.done, chunk, _Chunks(state, rows[0], jnp.bool_(False)))
  return out.state.replace(count=count)


def _sequential_batch(state: MatchState, rows: jax.Array, count: jax.Array) -> MatchState:
  del count
  state = jax.lax.fori_loop(0, rows.shape[0],
                            lambda i, s: insert_push_relabel(s, rows[i]), state)
  pr = state.extra
  return state.replace(extra=pr._replace(fallbacks=pr.fallbacks + rows.shape[0]))


@jax.jit
def _bracketed_costs(state: MatchState) -> tuple[jax.Array, jax.Array]:
  """``(capacity, L, n)`` scaled costs of every stored row at ``dist * (1 -+ 1e-6)``.

  Every stored row (a fixed shape per state, so this compiles once per configuration,
  not once per count), of which the first ``count`` are used. The algorithm's distances
  may differ from these by an ulp (fused multiply-adds), which can move a ceil by one
  where a scaled cost sits on an integer: the bracket covers that.
  """
  cfg = state.config
  dist = jax.vmap(lambda i: distance_row(state, state.requests[i]))(jnp.arange(cfg.capacity))
  costs = jax.vmap(lambda row: scaled_costs(cfg, row, state.extra.omega))
  return costs(dist * (1 - 1e-6)), costs(dist * (1 + 1e-6))


def check_push_relabel_invariants(state: MatchState) -> None:
  """1-feasibility and tightness of the per-level duals (raises AssertionError)."""
  pr = state.extra
  k = int(state.count)
  if k == 0:
    return
  tail = np.asarray(pr.tail_servers)
  server_of = np.asarray(state.server_of)[:k]
  request_of = np.asarray(state.request_of)
  level = np.asarray(pr.level)[:k]
  y_r, y_s = np.asarray(pr.y_r), np.asarray(pr.y_s)
  d_lo, d_hi = (np.asarray(d)[:k] for d in _bracketed_costs(state))  # (k, L, n)
  holder_level = np.where(request_of >= 0, np.asarray(pr.level)[np.maximum(request_of, 0)], _BIG)
  for r in range(k):
    s, l = server_of[r], int(level[r])
    if tail[s]:
      continue  # matched by the exact tail, not by push-relabel
    eligible = ((request_of < 0) | (holder_level >= l)) & ~tail
    dual = y_r[l, r] + y_s[l]
    if np.any((dual > d_hi[r, l] + 1)[eligible]):
      raise AssertionError(f"1-feasibility broken for request {r} at level {l}: "
                           f"max excess {(dual - d_hi[r, l])[eligible].max()}")
    if not d_lo[r, l, s] <= dual[s] <= d_hi[r, l, s]:
      raise AssertionError(f"matched edge ({r}, {s}) not tight at level {l}")
