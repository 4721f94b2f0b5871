"""Greedy incremental matching: each request takes its nearest free server."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.matching.state import MatchState, distance_row, first_argmin, reject_unless


def insert_greedy(state: MatchState, row: jax.Array) -> MatchState:
  """Matches the request stored at ``row`` to its nearest free server."""
  d = distance_row(state, state.requests[row])
  free = state.request_of < 0
  j = first_argmin(jnp.where(free, d, jnp.inf))
  new = state.replace(
      count=state.count + 1,
      request_of=state.request_of.at[j].set(row),
      server_of=state.server_of.at[row].set(j))
  # A non-finite row has no nearest free server (first_argmin then returns 0,
  # free or not): reject it rather than double-book a server.
  return reject_unless(free[j] & jnp.isfinite(d[j]), new, state)
