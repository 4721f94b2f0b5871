"""State and distances shared by the incremental matching algorithms."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

ALGORITHMS = ("push_relabel", "exact", "greedy")


@dataclasses.dataclass(frozen=True)
class MatchConfig:
  """Static configuration (hashable; part of the state's tree structure).

  Attributes:
    algorithm: "push_relabel", "exact" or "greedy".
    metric: "euclidean", "l1" or "precomputed".
    capacity: maximum number of requests.
    num_servers: number of servers n.
    dim: coordinate dimension (0 for "precomputed").
    delta, eps, levels: push-relabel parameters (see ``push_relabel``).
    exact_tail: push-relabel switches to an exact step for the last free
      requests (default off).
    seed: seed of push-relabel's random proposals.
    omega_init: push-relabel's first guess of OPT: "nearest" (default: the
      first request's distance to its nearest server, scale-free) or "one"
      (1, as the official C++ code).
    cost_dtype: dtype of push-relabel's coordinates, distances and scaled
      costs: "float32" (default) or "float64" (the C++ code's doubles; needs
      ``jax_enable_x64``).
    top_level: what push-relabel does when a request's dual reaches ``y_max``
      at the top level: "stay" (default: it stays there) or "raise" (the C++
      code exits; here the insertion is undone and ``extra.overflowed`` set).
    batch_relabel: how ``insert_batch``'s relabel round raises the free
      requests of its level: "global" (default, the paper's: all by the
      minimum slack among them, + 1) or "own" (not the paper's: each by its
      own minimum slack + 1, as a sequential relabel does).
  """

  algorithm: str
  metric: str
  capacity: int
  num_servers: int
  dim: int
  delta: float = 0.001
  eps: float = 0.2
  levels: int = 5
  exact_tail: int = 0
  seed: int = 0
  omega_init: str = "nearest"
  cost_dtype: str = "float32"
  top_level: str = "stay"
  batch_relabel: str = "global"


@struct.dataclass
class MatchState:
  """A matching of the requests inserted so far to distinct servers.

  Attributes:
    servers: ``(n, dim)`` server coordinates, or the ``(rows, n)`` distance
      matrix for ``metric="precomputed"``.
    requests: ``(capacity, dim)`` request coordinates, or ``(capacity,)`` row
      indices; entries past ``count`` are unused.
    count: number of inserted requests (int32 scalar).
    server_of: ``(capacity,)`` server of each request, -1 if unmatched/unused.
    request_of: ``(n,)`` request held by each server, -1 if free.
    u, v: dual potentials of requests and servers (exact algorithm: the
      Hungarian potentials, ``u_i + v_j <= c_ij`` with equality on matches).
    extra: algorithm-specific state (push-relabel duals, levels, ...) or None.
    rejected: set when an insertion was refused inside a caller's ``jit``
      (past capacity, a non-finite coordinate or a bad row index: the eager
      checks of ``insert`` cannot run on traced values). The state is left
      unchanged by such an insertion; ``check_invariants`` raises on it.
    config: the static :class:`MatchConfig`.
  """

  servers: jax.Array
  requests: jax.Array
  count: jax.Array
  server_of: jax.Array
  request_of: jax.Array
  u: jax.Array
  v: jax.Array
  extra: Any
  rejected: jax.Array
  config: MatchConfig = struct.field(pytree_node=False)


def reject_unless(ok: jax.Array, new: MatchState, old: MatchState) -> MatchState:
  """``new`` if ``ok``, else ``old`` flagged ``rejected`` (an insertion that found no server)."""
  old = old.replace(rejected=jnp.ones((), bool))
  return jax.tree.map(lambda a, b: jnp.where(ok, a, b), new, old)


def first_index(mask: jax.Array) -> jax.Array:
  """Index of the first ``True`` in a 1-D ``mask`` (0 when there is none).

  ``jnp.argmax`` on a mask, computed as a float ``min`` over positions: XLA's
  CPU backend runs the (value, index) reduction of ``argmax`` / ``argmin``
  unvectorized, about 12x slower than this at n = 10,000, and these searches
  sit in the innermost loops of every matcher.
  """
  size = mask.shape[0]
  if size >= 2**24:  # float32 positions stop being exact
    return jnp.argmax(mask).astype(jnp.int32)
  pos = jnp.min(jnp.where(mask, jnp.arange(size, dtype=jnp.float32), jnp.inf))
  return jnp.where(pos < size, pos, 0).astype(jnp.int32)


def first_argmin(x: jax.Array) -> jax.Array:
  """``jnp.argmin`` of a 1-D array without NaNs (the first minimum), vectorized."""
  return first_index(x == jnp.min(x))


_UNROLL_DIM = 16


def distance_row(state: MatchState, request: jax.Array) -> jax.Array:
  """Distances from one request (coordinates or row index) to every server."""
  metric = state.config.metric
  if metric == "precomputed":
    return state.servers[request]
  term = jnp.abs if metric == "l1" else jnp.square
  dim = state.servers.shape[1]
  if dim <= _UNROLL_DIM:
    # One column at a time: XLA's CPU backend fuses this into a single
    # vectorized loop over servers, while the row reduction over a short
    # minor axis below runs up to 7x slower at n = 10,000 in 2-D.
    total = term(state.servers[:, 0] - request[0])
    for k in range(1, dim):
      total = total + term(state.servers[:, k] - request[k])
  else:
    total = jnp.sum(term(state.servers - request[None, :]), axis=-1)
  return total if metric == "l1" else jnp.sqrt(total)


def matched_cost(state: MatchState) -> jax.Array:
  """Total distance of the current matching (in the coordinates' dtype)."""
  idx = jnp.arange(state.config.capacity)
  srv = jnp.maximum(state.server_of, 0)
  if state.config.metric == "precomputed":
    d = state.servers[state.requests, srv]
  else:
    diff = state.requests - state.servers[srv]
    d = (jnp.sum(jnp.abs(diff), -1) if state.config.metric == "l1"
         else jnp.sqrt(jnp.sum(diff * diff, -1)))
  live = (idx < state.count) & (state.server_of >= 0)
  return jnp.sum(jnp.where(live, d, 0.0))
