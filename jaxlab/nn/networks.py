"""The shared network pieces: an MLP, and :class:`Net`, the one way jaxlab holds a network.

Every network in jaxlab is an ``nnx.Module`` held as a :class:`Net`: the
module's static graph plus its parameter pytree, applied by ``nnx.merge``.
A :class:`Net` is an immutable pytree (its graph is static), so agents and
training states that contain one stay plain pytrees: ``jax.vmap`` over seeds,
``lax.scan`` over steps, ``optax`` on ``net.params`` and orbax checkpoints all
work on it unchanged, and ``net.replace(params=new)`` is an update.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from flax import nnx, struct

__all__ = ["MLP", "Net"]


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
    return self.out(self.features(x))

  def features(self, x: jax.Array) -> jax.Array:
    """The last hidden layer's activations (after its GELU and LayerNorm): the penultimate
    features the output layer reads, e.g. ``net.module().features(x)``."""
    for i, layer in enumerate(self.hidden):
      x = jax.nn.gelu(layer(x))
      if len(self.norms):
        x = self.norms[i](x)
    return x


class Net(struct.PyTreeNode):
  """An nnx module as (static graph, parameter pytree), applied functionally.

  Example:
    >>> net = Net.create(QEnsemble(3, 2, [32], rngs=nnx.Rngs(0)))
    >>> q = net(obs, actions)                    # with net.params
    >>> q = net(obs, actions, params=other)      # e.g. target parameters
    >>> graphdef, params = net                   # the older (graphdef, params) pair
  """

  graphdef: Any = struct.field(pytree_node=False)
  params: Any

  @classmethod
  def create(cls, module: nnx.Module) -> Net:
    graphdef, params = nnx.split(module)
    return cls(graphdef=graphdef, params=params)

  def __call__(self, *args, params: Any = None, **kwargs) -> jax.Array:
    return self.module(params)(*args, **kwargs)

  def module(self, params: Any = None) -> nnx.Module:
    """The module rebuilt with ``params`` (default ``self.params``), to call its other
    methods, e.g. ``net.module().forward(tokens, return_attention=True)``."""
    return nnx.merge(self.graphdef, self.params if params is None else params)

  def __iter__(self):
    """Unpacks as ``graphdef, params = net``: code written for the older bare pair
    (``nnx.split``'s output) keeps working when it is handed a :class:`Net`."""
    return iter((self.graphdef, self.params))
