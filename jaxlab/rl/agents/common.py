"""Pieces shared by the flow actor-critic agents (FAC, FQL): critic targets, checks, networks."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.core.rng import as_key_data, split_key_data
from jaxlab.nn import Net
from jaxlab.rl.networks import OneStepActor, QEnsemble, VelocityField

Batch = dict[str, jax.Array]
Q_AGGS = ("min", "mean")


def aggregate(qs: jax.Array, how: str) -> jax.Array:
  """Ensemble ``(num_qs, B)`` to ``(B,)``: pessimistic ``min`` or ``mean``."""
  return jnp.min(qs, axis=0) if how == "min" else jnp.mean(qs, axis=0)


def td_target(batch: Batch, next_q: jax.Array, discount: float) -> jax.Array:
  """``r + gamma * mask * Q_target(s', a')``; ``mask`` is 0 at true terminals only."""
  return batch["rewards"] + discount * batch["masks"] * next_q


def polyak(target: Any, online: Any, tau: float) -> Any:
  """``target <- (1 - tau) target + tau online``."""
  return optax.incremental_update(online, target, tau)


def critic_td_loss(critic: Any, params: Any, target_params: Any, batch: Batch,
                   next_actions: jax.Array, discount: float, q_agg: str
                   ) -> tuple[jax.Array, jax.Array]:
  """Mean squared TD error over the ensemble, and the ensemble's ``(num_qs, B)`` Q(s, a).

  Target: ``r + gamma * mask * agg(Q_target(s', a'))`` without gradient.
  """
  next_q = aggregate(critic(batch["next_observations"], next_actions, params=target_params),
                     q_agg)
  target = jax.lax.stop_gradient(td_target(batch, next_q, discount))
  qs = critic(batch["observations"], batch["actions"], params=params)
  return jnp.mean((qs - target[None]) ** 2), qs


def actor_q_loss(critic: Any, critic_params: Any, obs: jax.Array, actions: jax.Array,
                 normalize: bool) -> jax.Array:
  """``-mean Q(s, clip(a))`` (ensemble mean), over ``stop_grad(mean |Q|)`` if ``normalize``.

  The critic's parameters are constants here: only the actor gets this gradient.
  """
  q = jnp.mean(critic(obs, jnp.clip(actions, -1, 1),
                      params=jax.lax.stop_gradient(critic_params)), axis=0)
  loss = -q.mean()
  return loss / jax.lax.stop_gradient(jnp.abs(q).mean() + 1e-6) if normalize else loss


def q_stats(prefix: str, q: jax.Array) -> dict[str, jax.Array]:
  """Overestimation diagnostics of ``Q(s, pi(s))`` (rewards in {-1, 0}: Q > 0 is wrong)."""
  return {f"{prefix}/q_pi_mean": q.mean(), f"{prefix}/q_pi_max": q.max(),
          f"{prefix}/q_pi_pos_frac": jnp.mean((q > 0).astype(jnp.float32))}


def check_common_config(cfg: Any) -> None:
  """Validates the shared fields a config has (raises ``ValueError`` naming the field)."""
  positive = ("lr", "batch_size", "num_qs", "flow_steps", "discount", "tau")
  for name in positive:
    value = getattr(cfg, name, 1)
    if not value > 0:
      raise ValueError(f"config.{name} must be positive, got {value!r}")
  discount, tau = getattr(cfg, "discount", 0.0), getattr(cfg, "tau", 1.0)
  if not discount < 1 or not tau <= 1:
    raise ValueError(f"config.discount must be < 1 and tau <= 1, got {discount}, {tau}")
  if getattr(cfg, "q_agg", "min") not in Q_AGGS:
    raise ValueError(f"config.q_agg must be one of {Q_AGGS}, got {cfg.q_agg!r}")
  if not cfg.hidden_dims or any(int(h) < 1 for h in cfg.hidden_dims):
    raise ValueError(f"config.hidden_dims must be positive widths, got {cfg.hidden_dims!r}")


def config_dict(cfg: Any) -> dict[str, Any]:
  return dataclasses.asdict(cfg)


def check_example(example_obs: Any, example_actions: Any) -> tuple[int, int]:
  """``(obs_dim, action_dim)`` from example batches ``(B, d)`` or single rows ``(d,)``."""
  shapes = []
  for name, x in (("example_obs", example_obs), ("example_actions", example_actions)):
    shape = jnp.shape(x)
    if len(shape) not in (1, 2) or shape[-1] < 1:
      raise ValueError(f"{name} must have shape (dim,) or (batch, dim), got {shape}")
    shapes.append(int(shape[-1]))
  return shapes[0], shapes[1]


def flow_actor_critic_networks(seed: Any, example_obs: Any, example_actions: Any, config: Any):
  """``(rng, critic, actor, flow, action_dim)``: the three networks FAC and FQL share.

  A critic ensemble (LayerNorm per ``config.value_layer_norm``), a one-step
  actor and a velocity field, with ``config.hidden_dims`` unless the config gives
  a network its own widths (``critic_hidden_dims``, ``actor_hidden_dims``,
  ``flow_hidden_dims``, as FAC's does); ``rng`` is the raw key data left for the
  agent.
  """
  obs_dim, action_dim = check_example(example_obs, example_actions)
  rng, k_critic, k_actor, k_flow = split_key_data(as_key_data(seed), 4)
  def widths(net: str) -> tuple[int, ...]:
    own = getattr(config, f"{net}_hidden_dims", None)
    return tuple(config.hidden_dims if own is None else own)

  critic = Net.create(QEnsemble(obs_dim, action_dim, widths("critic"), num_qs=config.num_qs,
                                layer_norm=config.value_layer_norm, rngs=nnx.Rngs(k_critic)))
  actor = Net.create(OneStepActor(obs_dim, action_dim, widths("actor"),
                                  layer_norm=config.actor_layer_norm, rngs=nnx.Rngs(k_actor)))
  flow = Net.create(VelocityField(obs_dim, action_dim, widths("flow"),
                                  layer_norm=config.actor_layer_norm, rngs=nnx.Rngs(k_flow)))
  return rng, critic, actor, flow, action_dim
