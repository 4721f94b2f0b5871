r"""Goal-conditioned SAC: the low level of DIPPER / HIER and, alone, the FLAT baseline.

Soft actor-critic on ``(observation, goal)`` inputs with a tanh-Gaussian
policy, twin critics with a Polyak target and a learned temperature:

.. math::
  L_Q = \mathbb E (Q_i(s, g, a) - r
        - \gamma m (\min_j \bar Q_j(s', g, a') - \alpha \log\pi(a'|s', g)))^2
  L_\pi = \mathbb E [\alpha \log \pi(a|s, g) - \min_j Q_j(s, g, a)], \quad
  L_\alpha = -\log\alpha\, \mathbb E[\log\pi + \bar{\mathcal H}]

Batches come from hindsight-relabelled replay (:mod:`jaxlab.rl.hrl`).

References:
  Haarnoja et al., "Soft Actor-Critic Algorithms and Applications",
  arXiv:1812.05905, 2018. Andrychowicz et al., "Hindsight Experience Replay",
  arXiv:1707.01495, 2017.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from jaxlab.core.rng import as_key_data, split_key_data
from jaxlab.nn import MLP, Net
from jaxlab.rl.agents import common
from jaxlab.rl.networks import QEnsemble

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class TanhGaussianPolicy(nnx.Module):
  """``pi(a | obs, goal)``: a Gaussian squashed by tanh into ``[-1, 1]^action_dim``."""

  def __init__(self, in_dim: int, action_dim: int, hidden_dims: Sequence[int], *,
               rngs: nnx.Rngs):
    self.mlp = MLP(in_dim, hidden_dims, 2 * action_dim, rngs=rngs)

  def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    mean, log_std = jnp.split(self.mlp(x), 2, axis=-1)
    return mean, jnp.clip(log_std, LOG_STD_MIN, LOG_STD_MAX)


def tanh_gaussian_sample(mean, log_std, key) -> tuple[jax.Array, jax.Array]:
  """A reparameterized sample in ``[-1, 1]`` and its log-density, ``(B, A), (B,)``."""
  std = jnp.exp(log_std)
  u = mean + std * jax.random.normal(key, mean.shape, mean.dtype)
  return jnp.tanh(u), tanh_gaussian_log_prob_pre(mean, log_std, u)


def tanh_gaussian_log_prob_pre(mean, log_std, u) -> jax.Array:
  """Log-density of ``tanh(u)`` given the pre-squash ``u`` (numerically stable)."""
  normal = -0.5 * ((u - mean) / jnp.exp(log_std)) ** 2 - log_std - 0.5 * math.log(2 * math.pi)
  jac = 2.0 * (math.log(2.0) - u - jax.nn.softplus(-2.0 * u))  # log(1 - tanh(u)^2)
  return jnp.sum(normal - jac, axis=-1)


def tanh_gaussian_log_prob(mean, log_std, a, eps: float = 1e-5) -> jax.Array:
  """Log-density of a given action ``a`` in ``(-1, 1)`` (clipped by ``eps`` before atanh)."""
  u = jnp.arctanh(jnp.clip(a, -1 + eps, 1 - eps))
  return tanh_gaussian_log_prob_pre(mean, log_std, u)


@dataclasses.dataclass(frozen=True)
class SACConfig:
  """Goal-conditioned SAC hyperparameters."""

  lr: float = 3e-4  # Adam, actor / critic / temperature
  batch_size: int = 256  # transitions per update
  hidden_dims: tuple[int, ...] = (128, 128)  # actor and critic MLPs
  num_qs: int = 2  # twin critics
  discount: float = 0.98  # gamma (HER's default for goal reaching)
  tau: float = 0.005  # Polyak rate of the target critics
  init_temperature: float = 0.1  # alpha at the start
  target_entropy_scale: float = 1.0  # target entropy = -scale * action_dim
  value_layer_norm: bool = True  # LayerNorm in the critics


class SACAgent(struct.PyTreeNode):
  """Goal-conditioned SAC as an immutable pytree."""

  rng: jax.Array
  actor: Net
  critic: Net
  target_critic: Any
  log_alpha: jax.Array
  opt_state: Any  # Adam over {"actor", "critic", "log_alpha"}
  action_dim: int = struct.field(pytree_node=False)
  config: SACConfig = struct.field(pytree_node=False)

  @classmethod
  def create(cls, seed: Any, example_obs: Any, example_goal: Any, example_actions: Any,
             config: SACConfig = SACConfig()) -> SACAgent:
    if not isinstance(config, SACConfig):
      raise TypeError(f"config must be a SACConfig, got {type(config).__name__}")
    common.check_common_config(config)
    obs_dim, action_dim = common.check_example(example_obs, example_actions)
    goal_dim, _ = common.check_example(example_goal, example_actions)
    rng, k_actor, k_critic = split_key_data(as_key_data(seed), 3)
    hidden = tuple(config.hidden_dims)
    actor = Net.create(TanhGaussianPolicy(obs_dim + goal_dim, action_dim, hidden,
                                          rngs=nnx.Rngs(k_actor)))
    critic = Net.create(QEnsemble(obs_dim + goal_dim, action_dim, hidden, num_qs=config.num_qs,
                                  layer_norm=config.value_layer_norm, rngs=nnx.Rngs(k_critic)))
    log_alpha = jnp.asarray(math.log(config.init_temperature), jnp.float32)
    params = {"actor": actor.params, "critic": critic.params, "log_alpha": log_alpha}
    return cls(rng=rng, actor=actor, critic=critic, target_critic=critic.params,
               log_alpha=log_alpha, opt_state=optax.adam(config.lr).init(params),
               action_dim=action_dim, config=config)

  def get_config(self) -> dict[str, Any]:
    return common.config_dict(self.config)

  def dist(self, obs, goal, params=None) -> tuple[jax.Array, jax.Array]:
    return self.actor(jnp.concatenate([obs, goal], -1), params=params)

  def q(self, obs, goal, actions, params=None) -> jax.Array:
    """``(num_qs, B)`` critic values."""
    return self.critic(jnp.concatenate([obs, goal], -1), actions, params=params)

  def sample_actions(self, obs, goal, key, deterministic: bool = False) -> jax.Array:
    mean, log_std = self.dist(obs, goal)
    if deterministic:
      return jnp.tanh(mean)
    return tanh_gaussian_sample(mean, log_std, key)[0]

  def value(self, obs, goal, key, critic_params=None) -> jax.Array:
    """Soft value ``V(s, g) = E_pi[min_j Q_j(s, g, a) - alpha log pi(a|s, g)]`` (one sample)."""
    a, logp = tanh_gaussian_sample(*self.dist(obs, goal), key)
    q = jnp.min(self.q(obs, goal, a, params=critic_params), axis=0)
    return q - jnp.exp(self.log_alpha) * logp

  def losses(self, params, batch, keys) -> tuple[jax.Array, dict[str, jax.Array]]:
    cfg = self.config
    k_next, k_pi = keys
    obs, goal, next_obs = batch["observations"], batch["goals"], batch["next_observations"]
    alpha = jnp.exp(params["log_alpha"])
    next_a, next_logp = tanh_gaussian_sample(
        *self.dist(next_obs, goal, jax.lax.stop_gradient(params["actor"])), k_next)
    next_q = jnp.min(self.q(next_obs, goal, next_a, params=self.target_critic), axis=0)
    target = batch["rewards"] + cfg.discount * batch["masks"] * (
        next_q - jax.lax.stop_gradient(alpha) * next_logp)
    qs = self.q(obs, goal, batch["actions"], params=params["critic"])
    critic_loss = jnp.mean((qs - jax.lax.stop_gradient(target)[None]) ** 2)

    a, logp = tanh_gaussian_sample(*self.dist(obs, goal, params["actor"]), k_pi)
    q_pi = jnp.min(self.q(obs, goal, a, params=jax.lax.stop_gradient(params["critic"])), axis=0)
    actor_loss = jnp.mean(jax.lax.stop_gradient(alpha) * logp - q_pi)
    target_entropy = -cfg.target_entropy_scale * self.action_dim
    alpha_loss = -params["log_alpha"] * jnp.mean(jax.lax.stop_gradient(logp) + target_entropy)
    info = {"low/critic_loss": critic_loss, "low/actor_loss": actor_loss,
            "low/alpha": alpha, "low/q_mean": qs.mean(), "low/entropy": -logp.mean()}
    return critic_loss + actor_loss + alpha_loss, info

  def update(self, batch) -> tuple[SACAgent, dict[str, jax.Array]]:
    """One SAC step; batch keys: observations, goals, actions, rewards, next_observations, masks."""
    rng, *keys = split_key_data(self.rng, 3)
    params = {"actor": self.actor.params, "critic": self.critic.params,
              "log_alpha": self.log_alpha}
    grads, info = jax.grad(self.losses, has_aux=True)(params, batch, tuple(keys))
    updates, opt_state = optax.adam(self.config.lr).update(grads, self.opt_state)
    params = optax.apply_updates(params, updates)
    critic = self.critic.replace(params=params["critic"])
    return self.replace(
        rng=rng, actor=self.actor.replace(params=params["actor"]), critic=critic,
        target_critic=common.polyak(self.target_critic, critic.params, self.config.tau),
        log_alpha=params["log_alpha"], opt_state=opt_state), info
