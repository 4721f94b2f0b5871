"""Hints to XLA's operator fusion that leave the hinted values unchanged (up to flushed
subnormals; a leaf module)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["materialize"]


def materialize(y: jax.Array) -> jax.Array:
  """``y`` itself (infinities and NaN included), computed once for all its consumers.

  XLA fuses a chain of cheap elementwise ops into each of its consumers, so an array
  read by several fusions is recomputed in each: a stochastically rounded gradient
  read by both Adam moments and the weight update computed its random bits and its
  rounding three times. A float division is an op XLA does not duplicate, so the
  result of ``y / d`` is written once and every consumer reads it. Here ``d`` is 1,
  except 2 where ``y`` is ``+inf`` (and ``inf / 2 = inf``); XLA cannot know that, so it
  cannot fold the division away. Costs one division and one write and read per element:
  worth it only where the chain before ``y`` is longer and ``y`` has several consumers
  (measure). The values are ``y``'s bits, except subnormals on a backend that flushes
  them to zero in arithmetic (XLA:CPU does), which become zeros of their sign, as they
  would in any arithmetic consumer of ``y``. Results computed from ``y`` may still move
  at float32 rounding: XLA:CPU contracts a multiply and an add within one fusion into an
  FMA, and a new fusion boundary changes which pairs it contracts. Non-float arrays are
  returned as they are.
  """
  if not jnp.issubdtype(y.dtype, jnp.floating):
    return y
  big = jnp.finfo(y.dtype).max
  return y / jnp.where(y > big, 2, 1).astype(y.dtype)
