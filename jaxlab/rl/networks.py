"""Flax nnx networks of the flow actor-critic agents: velocity field, one-step actor, critics.

Built from the shared :class:`jaxlab.nn.MLP` and held by agents as :class:`jaxlab.nn.Net`.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.nn.networks import MLP

__all__ = ["OneStepActor", "QEnsemble", "VelocityField"]


class VelocityField(nnx.Module):
  """Flow-matching field ``v(obs, x, t)`` on ``concat(obs, x, t)``."""

  def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], *,
               layer_norm: bool = False, rngs: nnx.Rngs):
    self.mlp = MLP(obs_dim + action_dim + 1, hidden_dims, action_dim,
                   layer_norm=layer_norm, rngs=rngs)

  def __call__(self, obs: jax.Array, x: jax.Array, t: jax.Array) -> jax.Array:
    return self.mlp(jnp.concatenate([obs, x, t], axis=-1))


class OneStepActor(nnx.Module):
  """One-step policy ``pi(obs, z)``: noise to action in a single network call."""

  def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], *,
               layer_norm: bool = False, rngs: nnx.Rngs):
    self.mlp = MLP(obs_dim + action_dim, hidden_dims, action_dim,
                   layer_norm=layer_norm, rngs=rngs)

  def __call__(self, obs: jax.Array, noise: jax.Array) -> jax.Array:
    return self.mlp(jnp.concatenate([obs, noise], axis=-1))


class QEnsemble(nnx.Module):
  """``num_qs`` independent critics ``Q(obs, a)``; returns ``(num_qs, B)``."""

  def __init__(self, obs_dim: int, action_dim: int, hidden_dims: Sequence[int], *,
               num_qs: int = 2, layer_norm: bool = True, rngs: nnx.Rngs):
    self.members = nnx.List([
        MLP(obs_dim + action_dim, hidden_dims, 1, layer_norm=layer_norm, rngs=rngs)
        for _ in range(num_qs)])

  def __call__(self, obs: jax.Array, actions: jax.Array) -> jax.Array:
    x = jnp.concatenate([obs, actions], axis=-1)
    return jnp.stack([m(x)[..., 0] for m in self.members])
