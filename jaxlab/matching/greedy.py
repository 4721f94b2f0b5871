"""Greedy incremental matching: each request takes its nearest free server."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.matching.state import MatchState, distance_row, first_argmin


def insert_greedy(state: MatchState, row: jax.Array) -> MatchState:
  """Matches the request stored at ``row`` to its nearest free server."""
  d = distance_row(state, state.requests[row])
  j = first_argmin(jnp.where(state.request_of < 0, d, jnp.inf))
  return state.replace(
      count=state.count + 1,
      request_of=state.request_of.at[j].set(row),
      server_of=state.server_of.at[row].set(j))
