r"""Exact incremental matching: one shortest augmenting path per insertion.

The row step of the Hungarian method with potentials (Kuhn-Munkres in the
Jonker-Volgenant / e-maxx form): inserting request ``i`` grows a Dijkstra tree
over servers on reduced costs ``c_ij - u_i - v_j >= 0`` from ``i`` until it
reaches a free server, shifts the potentials by the tree's distances and flips
the path. Every earlier request stays matched, the matching is optimal for the
requests inserted so far after every insertion, and the potentials certify it:

.. math::
  u_i + v_j \le c_{ij} \ \forall i, j, \qquad u_i + v_j = c_{ij} \text{ on matches}.

A step costs O(n * k) for k servers scanned (k <= number of inserted
requests + 1), each scan computing one request's distance row on the fly, so
memory stays O(n d) for coordinate metrics.

References:
  Kuhn, "The Hungarian method for the assignment problem", 1955.
  Jonker, Volgenant, "A shortest augmenting path algorithm for dense and sparse
  linear assignment problems", Computing 1987.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.matching.state import MatchState, distance_row, first_argmin, reject_unless


class DijkstraCarry(NamedTuple):
  """Loop state of one augmenting-path search over the n servers."""

  used: jax.Array  # (n,) bool: server in the shortest-path tree
  dist: jax.Array  # (n,) tentative reduced path length to each server
  way: jax.Array  # (n,) predecessor server on the path (n: the new request)
  j: jax.Array  # the closest server outside the tree


def insert_exact(
    state: MatchState, row: jax.Array, column_mask: jax.Array | None = None
) -> MatchState:
  """Inserts the request stored at index ``row`` (= ``state.count``), optimally.

  Dijkstra with lazy potential updates (Jonker-Volgenant): path lengths are
  kept in absolute terms and the potentials are shifted once at the end, for
  the columns in the tree, by ``T - dist[j]`` (``T``: length to the free
  server reached). Equivalent to e-maxx's per-step updates, without a scatter
  per step. The new request is the tree's root (e-maxx's virtual column
  ``n``), scanned before the loop so that every loop array has length n.
  ``column_mask`` (bool, ``(n,)``) restricts the search to some servers
  (push-relabel's exact tail).
  """
  n, cap = state.config.num_servers, state.config.capacity
  root = jnp.int32(n)  # the virtual column holding the new request

  def reduced_row(i: jax.Array) -> jax.Array:
    row_cost = distance_row(state, state.requests[i])
    if column_mask is not None:
      row_cost = jnp.where(column_mask, row_cost, jnp.inf)
    return row_cost - state.u[i] - state.v

  def closest(used, dist):
    return first_argmin(jnp.where(used, jnp.inf, dist))

  def body(c: DijkstraCarry) -> DijkstraCarry:
    # The matched edge (i, j) is tight, so path lengths continue from dist[j].
    used = c.used.at[c.j].set(True)
    cur = c.dist[c.j] + reduced_row(state.request_of[c.j])
    better = (~used) & (cur < c.dist)
    dist = jnp.where(better, cur, c.dist)
    way = jnp.where(better, c.j, c.way)
    return DijkstraCarry(used, dist, way, closest(used, dist))

  used = jnp.zeros(n, bool)
  dist = reduced_row(row) + state.u[row]  # the new request's potential starts at 0
  init = DijkstraCarry(used, dist, jnp.full(n, root, jnp.int32), closest(used, dist))
  # Grow the tree until the closest server is free. The closest server is in
  # the tree already only when no finite path is left (a non-finite row): stop
  # there too, so that the loop always ends, and reject the insertion below.
  c = jax.lax.while_loop(lambda c: (state.request_of[c.j] >= 0) & ~c.used[c.j], body, init)
  total = c.dist[c.j]
  shift = jnp.where(c.used, total - c.dist, 0.0)  # zero outside the tree
  v = state.v - shift
  rows = jnp.where(c.used, state.request_of, cap)  # scratch slot outside the tree
  u = jnp.concatenate([state.u.at[row].set(total), jnp.zeros(1, state.u.dtype)])
  u = u.at[rows].add(shift)[:cap]

  def flip(carry):  # augment along the predecessor chain back to the root
    request_of, j = carry
    prev = c.way[j]
    holder = jnp.where(prev == root, row, request_of[jnp.minimum(prev, n - 1)])
    return request_of.at[j].set(holder), prev

  request_of, _ = jax.lax.while_loop(
      lambda rc: rc[1] != root, flip, (state.request_of, c.j))
  owners = jnp.where(request_of >= 0, request_of, cap)
  server_of = jnp.full(cap + 1, -1, jnp.int32).at[owners].set(jnp.arange(n, dtype=jnp.int32))
  new = state.replace(
      count=state.count + 1, request_of=request_of, server_of=server_of[:cap], u=u, v=v)
  found = ~c.used[c.j] & (state.request_of[c.j] < 0) & jnp.isfinite(total)
  return reject_unless(found, new, state)
