"""The time-conditioned MLP velocity field the generative experiments train.

``v(obs, x, t) = MLP([x, emb(time_scale * t), obs])`` with ``emb`` the sinusoidal
:func:`jaxlab.models.ddpm.timestep_embedding` and ``obs`` a condition (a one-hot label,
or a ``(B, 0)`` array for an unconditional flow): the signature
:func:`jaxlab.nn.flows.euler_sample` and :func:`jaxlab.nn.flows.flow_matching_loss` take.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from jaxlab.models.ddpm import timestep_embedding
from jaxlab.nn import MLP, Net


def velocity_mlp(data_dim: int, hidden: tuple[int, ...], *, cond_dim: int = 0,
                 emb_dim: int = 32, seed: int = 0) -> Net:
  """A :class:`~jaxlab.nn.MLP` ``data_dim + emb_dim + cond_dim -> hidden -> data_dim``."""
  for name, v in (("data_dim", data_dim), ("emb_dim", emb_dim)):
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
      raise ValueError(f"{name} must be a positive int, got {v!r}")
  if isinstance(cond_dim, bool) or not isinstance(cond_dim, int) or cond_dim < 0:
    raise ValueError(f"cond_dim must be an int >= 0, got {cond_dim!r}")
  return Net.create(MLP(data_dim + emb_dim + cond_dim, tuple(hidden), data_dim,
                        rngs=nnx.Rngs(seed)))


def velocity_field(net: Net, params, *, emb_dim: int = 32, time_scale: float = 1000.0
                   ) -> Callable[[jax.Array, jax.Array, jax.Array], jax.Array]:
  """The field ``(obs (B, C), x (B, D), t (B, 1)) -> (B, D)`` of ``net`` with ``params``."""
  def field(obs, x, t):
    emb = timestep_embedding(time_scale * t[:, 0], emb_dim)
    return net(jnp.concatenate([x, emb, obs], axis=-1), params=params)
  return field
