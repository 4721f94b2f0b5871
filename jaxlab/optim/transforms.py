"""Quantization steps as optax transforms: gradients in, weights out.

In the paper's master/worker model (Tang, Li, Zou 2025, Sec. 3) the worker
computes the gradient at quantized weights ``Q_W(W)``, the master receives a
quantized gradient ``Q_G(g)``, updates its moments and stores the new weights
quantized. :func:`quantize_updates` is ``Q_G`` (the first link of a chain) and
:func:`quantize_weights` is ``Q_W`` (the last link): it rewrites the update so
that ``optax.apply_updates(params, updates)`` lands on ``Q_W(params + u)``.

Stochastic rounding draws from a PRNG key kept in the state as raw key data
(``jax.random.key_data``, uint32), so states are plain arrays. Each step
advances the key once (:func:`~jaxlab.core.rng.advance_key`) and the step key
keys one counter-hash stream over the whole flattened tree: element ``i`` of
the concatenated leaves (in ``jax.tree.leaves`` order) rounds with
``stream_bits(i, *key_words(step_key))``. The bits are thus a function of
(seed, quantity, step, flat index) only, which is what lets the fused Pallas
step of :func:`jaxlab.optim.quantized_adam` (one kernel over the flat buffer)
draw exactly the same bits as this per-leaf jnp path. (Until the fused path
was added each leaf drew from its own split key, so stochastic trajectories
from before that change differ from today's; nearest and truncate are
unchanged.)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import optax

from jaxlab.core.checks import check_int
from jaxlab.core.fusion import materialize
from jaxlab.core.rng import advance_key, stream_key_data
from jaxlab.quant.float_format import FloatFormat, check_rounding, quantize, quantize_tree

# Stream ids folded into the seed, so G, M, V and W draw independent bits.
STREAM_GRADS, STREAM_MU, STREAM_NU, STREAM_WEIGHTS = 1, 2, 3, 4


def is_literal_zero(x: Any) -> bool:
  """True for a Python int/float equal to 0 (never for an array or a tracer)."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and x == 0


def leaf_offsets(leaves: list) -> list[int]:
  """Index of each leaf's first element in the concatenation of the raveled leaves."""
  offsets, total = [], 0
  for x in leaves:
    offsets.append(total)
    total += int(x.size)
  return offsets


def quantize_flat(leaves: list, fmt: FloatFormat, rounding: str, key: jax.Array | None) -> list:
  """Quantizes each leaf as one slice of the flattened tree (stochastic bits by flat index)."""
  return [quantize(x, fmt, rounding=rounding, key=key, offset=o)
          for x, o in zip(leaves, leaf_offsets(leaves), strict=True)]


def check_format(fmt: Any, name: str) -> None:
  if fmt is not None and not isinstance(fmt, FloatFormat):
    raise TypeError(f"{name} must be a jaxlab.quant.FloatFormat or None, got {fmt!r}")


class QuantizeState(NamedTuple):
  """State of :func:`quantize_updates` / :func:`quantize_weights`."""

  key: jax.Array  # raw uint32 key data, advanced every step


def quantize_updates(
    fmt: FloatFormat | None, *, rounding: str = "nearest", seed: int = 0
) -> optax.GradientTransformation:
  """``Q_G``: rounds every incoming update (gradient) to ``fmt``.

  Args:
    fmt: the gradient format, or None for the identity.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic-rounding stream.

  Returns:
    An ``optax.GradientTransformation``; ``fmt=None`` gives ``optax.identity()``.
  """
  check_format(fmt, "grads")
  check_rounding(rounding, need_key=False)
  check_int(seed, "seed")  # fails here, not deep in jax.random.key's trace
  if fmt is None:
    return optax.identity()

  def init_fn(params):
    del params
    return QuantizeState(key=stream_key_data(seed, STREAM_GRADS))

  def update_fn(updates, state, params=None):
    del params
    leaves, treedef = jax.tree.flatten(updates)
    key, step_key = advance_key(state.key, rounding == "stochastic")
    # Written once (jaxlab.core.materialize): Adam's two moments and the weight update
    # read the rounded gradient, and XLA would otherwise recompute its random bits and
    # rounding in each of them.
    out = [materialize(x) for x in quantize_flat(leaves, fmt, rounding, step_key)]
    return jax.tree.unflatten(treedef, out), QuantizeState(key=key)

  return optax.GradientTransformation(init_fn, update_fn)


def quantize_weights(
    fmt: FloatFormat | None, *, rounding: str = "nearest", seed: int = 0
) -> optax.GradientTransformation:
  """``Q_W``: rewrites updates so the new parameters are representable in ``fmt``.

  ``u' = Q_W(p + u) - p``, computed in the parameter dtype, so that
  ``optax.apply_updates(p, u') = p + u'`` equals ``Q_W(p + u)``. The identity
  holds exactly whenever ``Q_W(p + u) - p`` is representable in the parameter
  dtype: always once ``p`` itself is in ``fmt`` and ``fmt`` has at most
  ``23 - k`` mantissa bits for a ``2**k`` jump in magnitude (for float32 params:
  every step short of an update that moves a weight by about ``2**(23 - M)``
  times its size).

  Args:
    fmt: the weight format, or None for the identity.
    rounding: "nearest", "stochastic" or "truncate".
    seed: seed of the stochastic-rounding stream.

  Returns:
    An ``optax.GradientTransformation`` that needs ``params`` in ``update``.
  """
  check_format(fmt, "weights")
  check_rounding(rounding, need_key=False)
  check_int(seed, "seed")  # fails here, not deep in jax.random.key's trace
  if fmt is None:
    return optax.identity()

  def init_fn(params):
    del params
    return QuantizeState(key=stream_key_data(seed, STREAM_WEIGHTS))

  def update_fn(updates, state, params=None):
    if params is None:
      raise ValueError("quantize_weights needs params: call update(updates, state, params)")
    leaves, treedef = jax.tree.flatten(updates)
    p_leaves = treedef.flatten_up_to(params)
    key, step_key = advance_key(state.key, rounding == "stochastic")
    moved = [(p + u).astype(p.dtype) for u, p in zip(leaves, p_leaves, strict=True)]
    targets = quantize_flat(moved, fmt, rounding, step_key)
    out = [(t - p).astype(p.dtype) for t, p in zip(targets, p_leaves, strict=True)]
    return jax.tree.unflatten(treedef, out), QuantizeState(key=key)

  return optax.GradientTransformation(init_fn, update_fn)


def add_decayed_weights(weight_decay: jax.typing.ArrayLike) -> optax.GradientTransformation:
  """``u + weight_decay * p``, skipped for a literal Python 0.

  Like ``optax.add_decayed_weights`` (same ``EmptyState``, so the state has
  one structure whatever the value), but a concrete ``weight_decay == 0``
  costs nothing. A traced value (``optax.inject_hyperparams``) always applies
  the term: the only Python branch is on the argument's type, never on a
  traced number.
  """
  inner = optax.add_decayed_weights(weight_decay)
  literal_zero = is_literal_zero(weight_decay)

  def update_fn(updates, state, params=None):
    if literal_zero:
      return updates, state
    return inner.update(updates, state, params)

  return optax.GradientTransformation(inner.init, update_fn)


def quantize_params(
    params: Any,
    fmt: FloatFormat | None,
    *,
    rounding: str = "nearest",
    key: jax.Array | None = None,
) -> Any:
  """``Q_W(params)``: the weights the worker evaluates the gradient at.

  Example:
    >>> grads = jax.grad(loss)(quantize_params(params, FloatFormat(8, 4)), batch)
  """
  return quantize_tree(params, fmt, rounding=rounding, key=key)
