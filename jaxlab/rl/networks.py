"""Flax nnx networks for flow policies and critics, and a functional wrapper.

The agents are immutable pytrees (FQL style), so each network is held as a
:class:`Net`: the module's static graph plus its parameter pytree, applied by
``nnx.merge``. That keeps ``jax.vmap`` over seeds and ``lax.scan`` over steps
plain pytree operations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx, struct


class MLP(nnx.Module):
  """GELU MLP; optional LayerNorm after every hidden activation (as FQL's ``MLP``).

  Args:
    in_dim: input features.
    hidden_dims: widths of the hidden layers.
    out_dim: output features.
    layer_norm: LayerNorm after each hidden GELU.
    rngs: ``nnx.Rngs`` for the initializers.
  """

  def __init__(self, in_dim: int, hidden_dims: Sequence[int], out_dim: int, *,
               layer_norm: bool = False, rngs: nnx.Rngs):
    dims = [in_dim, *hidden_dims]
    self.hidden = nnx.List(
        [nnx.Linear(a, b, rngs=rngs) for a, b in zip(dims[:-1], dims[1:], strict=True)])
    self.norms = nnx.List(
        [nnx.LayerNorm(b, rngs=rngs) for b in hidden_dims] if layer_norm else [])
    self.out = nnx.Linear(dims[-1], out_dim, rngs=rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    for i, layer in enumerate(self.hidden):
      x = jax.nn.gelu(layer(x))
      if len(self.norms):
        x = self.norms[i](x)
    return self.out(x)


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


class Net(struct.PyTreeNode):
  """An nnx module as (static graph, parameter pytree), applied functionally.

  Example:
    >>> net = Net.create(QEnsemble(3, 2, [32], rngs=nnx.Rngs(0)))
    >>> q = net(obs, actions)                    # with net.params
    >>> q = net(obs, actions, params=other)      # e.g. target parameters
  """

  graphdef: Any = struct.field(pytree_node=False)
  params: Any

  @classmethod
  def create(cls, module: nnx.Module) -> Net:
    graphdef, params = nnx.split(module)
    return cls(graphdef=graphdef, params=params)

  def __call__(self, *args, params: Any = None) -> jax.Array:
    return nnx.merge(self.graphdef, self.params if params is None else params)(*args)
