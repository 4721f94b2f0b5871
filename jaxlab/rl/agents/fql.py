r"""Flow Q-Learning (FQL): a behavior flow trained jointly, a one-step actor distilled from it.

.. math::
  L = \underbrace{\mathbb E (Q(s,a) - r - \gamma m\, \mathrm{agg}\,\bar Q(s', \pi(s')))^2}_{critic}
    + \underbrace{L_{FM}(v) + \alpha \|\pi(s,z) - \mathrm{sg}\,\mathrm{Flow}_v(s,z)\|^2
      - \mathbb E\, Q(s, \pi(s,z)) / \mathrm{sg}(\mathbb E|Q|)}_{actor}

No critic penalty: the behavior constraint acts only through the distillation
weight ``alpha``. FAC differs by pre-training and freezing the flow and by the
density-weighted penalty on the critic (:mod:`jaxlab.rl.agents.fac`).

References:
  Park, Li, Levine, "Flow Q-Learning", arXiv:2502.02538, 2025.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core.rng import split_key_data
from jaxlab.nn import Net, flows
from jaxlab.rl.agents import common


@dataclasses.dataclass(frozen=True)
class FQLConfig:
  """FQL hyperparameters (defaults: the FQL code's; alpha is tuned per task there)."""

  lr: float = 3e-4  # Adam learning rate, all networks
  batch_size: int = 256  # transitions per update
  hidden_dims: tuple[int, ...] = (512, 512, 512, 512)  # MLP widths of every network
  actor_layer_norm: bool = False  # LayerNorm in the actor and the flow
  value_layer_norm: bool = True  # LayerNorm in the critics
  num_qs: int = 2  # critic ensemble size
  q_agg: str = "mean"  # ensemble aggregation of the TD target ("mean" in FQL)
  discount: float = 0.99  # gamma
  tau: float = 0.005  # Polyak rate of the target critic
  alpha: float = 10.0  # distillation weight (FQL tunes it per task)
  flow_steps: int = 10  # Euler steps of the flow
  normalize_q_loss: bool = True  # divide the actor's Q term by stop_grad(mean |Q|)
  pretrain_steps: int = 0  # FQL trains its flow jointly: no separate stage


class FQLAgent(struct.PyTreeNode):
  """FQL as an immutable pytree (same interface as :class:`~jaxlab.rl.agents.fac.FACAgent`)."""

  rng: jax.Array
  critic: Net
  target_critic: Any
  actor: Net
  flow: Net
  opt_state: Any  # Adam over {"critic", "actor", "flow"}
  action_dim: int = struct.field(pytree_node=False)
  config: FQLConfig = struct.field(pytree_node=False)

  @classmethod
  def create(cls, seed: Any, example_obs: Any, example_actions: Any,
             config: FQLConfig = FQLConfig()) -> FQLAgent:
    if not isinstance(config, FQLConfig):
      raise TypeError(f"config must be an FQLConfig, got {type(config).__name__}")
    common.check_common_config(config)
    if config.alpha < 0 or config.pretrain_steps != 0:
      raise ValueError(f"config.alpha must be >= 0 and pretrain_steps 0, got {config.alpha}, "
                       f"{config.pretrain_steps}")
    rng, critic, actor, flow, action_dim = common.flow_actor_critic_networks(
        seed, example_obs, example_actions, config)
    params = {"critic": critic.params, "actor": actor.params, "flow": flow.params}
    return cls(rng=rng, critic=critic, target_critic=critic.params, actor=actor, flow=flow,
               opt_state=optax.adam(config.lr).init(params), action_dim=action_dim,
               config=config)

  def get_config(self) -> dict[str, Any]:
    return common.config_dict(self.config)

  def losses(self, params: dict[str, Any], batch: common.Batch, keys: tuple[jax.Array, ...]
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    cfg = self.config
    k_next, k_flow, k_actor = keys
    obs, actions = batch["observations"], batch["actions"]
    noise = lambda k: jax.random.normal(k, actions.shape, actions.dtype)

    next_a = jnp.clip(self.actor(batch["next_observations"], noise(k_next),
                                 params=jax.lax.stop_gradient(params["actor"])), -1, 1)
    td_loss, qs = common.critic_td_loss(self.critic, params["critic"], self.target_critic, batch,
                                        next_a, cfg.discount, cfg.q_agg)

    field = lambda o, x, t: self.flow(o, x, t, params=params["flow"])
    bc_flow = flows.flow_matching_loss(field, obs, actions, k_flow)
    z = noise(k_actor)
    target = jnp.clip(flows.euler_sample(field, obs, z, cfg.flow_steps), -1, 1)
    a_actor = self.actor(obs, z, params=params["actor"])
    distill = jnp.mean((a_actor - jax.lax.stop_gradient(target)) ** 2)
    q_loss = common.actor_q_loss(self.critic, params["critic"], obs, a_actor, cfg.normalize_q_loss)
    actor_loss = bc_flow + cfg.alpha * distill + q_loss

    q_pi = jnp.mean(self.critic(obs, jnp.clip(a_actor, -1, 1),
                                params=jax.lax.stop_gradient(params["critic"])), axis=0)
    info = {"critic/td_loss": td_loss, "critic/q_data_mean": qs.mean(), "actor/loss": actor_loss,
            "actor/bc_flow": bc_flow, "actor/distill": distill, "actor/q_loss": q_loss,
            "actor/action_abs": jnp.abs(a_actor).mean(),
            **common.q_stats("critic", jax.lax.stop_gradient(q_pi))}
    return td_loss + actor_loss, info

  def update(self, batch: common.Batch) -> tuple[FQLAgent, dict[str, jax.Array]]:
    rng, *keys = split_key_data(self.rng, 4)
    params = {"critic": self.critic.params, "actor": self.actor.params, "flow": self.flow.params}
    grads, info = jax.grad(self.losses, has_aux=True)(params, batch, tuple(keys))
    updates, opt_state = optax.adam(self.config.lr).update(grads, self.opt_state)
    params = optax.apply_updates(params, updates)
    critic = self.critic.replace(params=params["critic"])
    return self.replace(
        rng=rng, critic=critic, actor=self.actor.replace(params=params["actor"]),
        flow=self.flow.replace(params=params["flow"]),
        target_critic=common.polyak(self.target_critic, critic.params, self.config.tau),
        opt_state=opt_state), info

  def sample_actions(self, obs: jax.Array, key: jax.Array) -> jax.Array:
    noise = jax.random.normal(key, obs.shape[:-1] + (self.action_dim,), obs.dtype)
    return jnp.clip(self.actor(obs, noise), -1.0, 1.0)


def get_config() -> FQLConfig:
  """The default FQL configuration."""
  return FQLConfig()
