"""Action checks shared by the environments (a leaf module).

``step`` is jitted by gymnax, so an action is always traced there: its shape is
checked statically (a length-1 action once broadcast to both axes), and a
non-finite action, which cannot raise, is replaced by a zero move and flagged
in ``info["invalid_action"]`` instead of freezing or poisoning the state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def check_action(action: jax.typing.ArrayLike, dim: int = 2) -> tuple[jax.Array, jax.Array]:
  """``(action, valid)``: the action (zeros where invalid) and whether it was finite.

  Raises:
    ValueError: the action's shape is not ``(dim,)``.
  """
  action = jnp.asarray(action)
  if action.shape != (dim,):
    raise ValueError(f"action must have shape ({dim},), got {action.shape}")
  valid = jnp.all(jnp.isfinite(action))
  return jnp.where(valid, action, jnp.zeros_like(action)), valid
