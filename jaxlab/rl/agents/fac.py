r"""Flow Actor-Critic (FAC): a frozen behavior flow's density weights the critic penalty.

1. Behavior proxy: a flow-matching velocity field trained on the dataset's
   actions (:meth:`FACAgent.pretrain_update`), then frozen. Its log-density of
   every dataset action is cached once (:meth:`FACAgent.behavior_log_prob`).
2. Critic (ensemble, LayerNorm, Polyak target):

   .. math::
     L_Q = \mathbb E (Q(s,a) - r - \gamma m\, \mathrm{agg}\, \bar Q(s', \pi(s')))^2
       + \alpha\, \mathbb E[\mathrm{sg}(w)\, Q(s, a_\pi)],
     \quad w = \mathrm{clip}(1 - \hat\beta(a_\pi|s)/\epsilon, 0, 1)

   with :math:`a_\pi = \mathrm{clip}(\pi(s, z))` and the threshold
   :math:`\log\epsilon` the cached log-density of the transition's own action
   ("batch_adaptive"), the batch minimum or the dataset minimum. Actions the
   behavior rarely takes are pushed down; in-support ones are left alone.
3. One-step actor distilled from the frozen flow with the same noise:

   .. math::
     L_\pi = \lambda \|\pi(s,z) - \mathrm{Flow}(s,z)\|^2
       - \mathbb E\, Q(s, \mathrm{clip}\,\pi(s,z)) / \mathrm{sg}(\mathbb E|Q|).

Critic and actor losses are summed and take one Adam step (the actor loss
sees the critic's parameters as constants).

``alpha = 0`` switches the penalty off (the unregularized flow actor-critic of
the ablation, :mod:`jaxlab.rl.agents.unregularized`); ``distill = 0`` drops
the behavior term from the actor.

References:
  Chae, Park, Shin, Kim, Han, Sung, "Flow Actor-Critic for Offline
  Reinforcement Learning", arXiv:2602.18015 (ICLR 2026).
  Park, Li, Levine, "Flow Q-Learning", arXiv:2502.02538, 2025.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core.rng import split_key_data
from jaxlab.nn import Net, flows
from jaxlab.rl.agents import common

THRESHOLDS = ("batch_adaptive", "batch_min", "dataset_min")
WEIGHTS = ("linear", "log")


@dataclasses.dataclass(frozen=True)
class FACConfig:
  """FAC hyperparameters; the defaults are the official code's (``get_config`` of its FAC agent).

  Our experiments state their own settings (``experiments/flow_actor_critic.py``: discount
  0.99, 2 x 128 networks, an explicit ``pretrain_steps``).

  Behavior-flow pre-training follows the official ``main.py`` by default (read from
  github.com/JongseongChae/FAC, ``main.py`` and ``utils/datasets.py``): its flag
  ``epoch_flow_proxy`` (250) epochs over the dataset, with a pre-training batch of
  ``batch_size`` times 1 below 100,000 transitions, 4 below 500,000 and 16 from there
  (its pixel tasks keep ``batch_size``; we have none), for
  ``epochs * ceil(N / pretrain_batch)`` steps, each batch drawn uniformly *with*
  replacement (``Dataset.sample`` uses ``np.random.randint``). The trainer resolves this
  for a dataset of N transitions (:func:`jaxlab.rl.train.pretrain_plan`). An explicit
  ``pretrain_steps`` keeps our earlier schedule: that many steps of ``batch_size``.
  ``pretrain_shuffle=True`` draws without replacement instead: a fresh permutation per
  epoch, the last partial batch padded with rows of weight 0.
  """

  lr: float = 3e-4  # Adam learning rate, all networks
  batch_size: int = 256  # transitions per update
  hidden_dims: tuple[int, ...] = (512, 512, 512, 512)  # MLP widths of every network...
  critic_hidden_dims: tuple[int, ...] | None = None  # ...unless given per network
  actor_hidden_dims: tuple[int, ...] | None = None
  flow_hidden_dims: tuple[int, ...] | None = None
  actor_layer_norm: bool = False  # LayerNorm in the actor and the flow
  value_layer_norm: bool = True  # LayerNorm in the critics
  num_qs: int = 2  # critic ensemble size
  q_agg: str = "min"  # ensemble aggregation of the TD target: "min" or "mean"
  discount: float = 0.995  # gamma (the official default; FQL's is 0.99)
  tau: float = 0.005  # Polyak rate of the target critic
  alpha: float = 1.0  # weight of the density-weighted critic penalty (0: off)
  distill: float = 1.0  # lambda, weight of the distillation term in the actor loss
  threshold: str = "batch_adaptive"  # log-epsilon: own action / batch min / dataset min
  weight: str = "linear"  # w = 1 - beta/eps ("linear") or 1 - log(1 + (beta/eps)^tau)/log 2
  weight_tau: float = 1.0  # tau of the "log" weight (1: logarithmic; 0.5 / 2 the other shapes)
  flow_steps: int = 10  # Euler steps of the flow, for sampling and densities
  divergence: str = "exact"  # "exact", "hutchinson" (Rademacher) or "hutchinson_gaussian"
  num_probes: int = 8  # Hutchinson probes
  normalize_q_loss: bool = True  # divide the actor's Q term by stop_grad(mean |Q|)
  pretrain_steps: int | None = None  # behavior-flow steps; None: from epochs and dataset size
  pretrain_epochs: int = 250  # epochs of behavior-flow pre-training when pretrain_steps is None
  pretrain_shuffle: bool = False  # True: a permutation per epoch (no replacement), padded rows
  # of the last batch weighted 0; False: uniform draws with replacement (the official code)


class FACAgent(struct.PyTreeNode):
  """FAC as an immutable pytree: ``create`` / ``pretrain_update`` / ``update`` / ``sample_actions``.

  Example:
    >>> agent = FACAgent.create(0, obs[:1], actions[:1], FACConfig(hidden_dims=(64, 64)))
    >>> agent, info = agent.pretrain_update(batch)       # behavior flow, then frozen
    >>> batch["log_prob"] = agent.behavior_log_prob(batch["observations"], batch["actions"])
    >>> agent, info = agent.update(batch)                # critic + actor step
    >>> actions = agent.sample_actions(obs, jax.random.key(1))
  """

  rng: jax.Array  # raw uint32 key data
  critic: Net
  target_critic: Any
  actor: Net
  flow: Net
  opt_state: Any  # Adam over {"critic", "actor"}
  flow_opt_state: Any  # Adam of the behavior flow (pre-training only)
  log_prob_min: jax.Array  # minimum cached behavior log-density over the dataset
  action_dim: int = struct.field(pytree_node=False)
  config: FACConfig = struct.field(pytree_node=False)

  @classmethod
  def create(cls, seed: Any, example_obs: Any, example_actions: Any,
             config: FACConfig = FACConfig()) -> FACAgent:
    """Initializes all networks from ``seed`` (an int or a PRNG key; vmappable as a key)."""
    check_config(config)
    rng, critic, actor, flow, action_dim = common.flow_actor_critic_networks(
        seed, example_obs, example_actions, config)
    tx = optax.adam(config.lr)
    return cls(rng=rng, critic=critic, target_critic=critic.params, actor=actor, flow=flow,
               opt_state=tx.init({"critic": critic.params, "actor": actor.params}),
               flow_opt_state=tx.init(flow.params),
               log_prob_min=jnp.asarray(-jnp.inf, jnp.float32), action_dim=action_dim,
               config=config)

  def get_config(self) -> dict[str, Any]:
    return common.config_dict(self.config)

  # -- behavior proxy ---------------------------------------------------------
  def pretrain_update(self, batch: common.Batch) -> tuple[FACAgent, dict[str, jax.Array]]:
    """One flow-matching step of the behavior flow (stage 1).

    ``batch["weights"]``, where present, weights the examples (0: a padding row).
    """
    rng, key = split_key_data(self.rng, 2)

    def loss_fn(params):
      field = lambda o, x, t: self.flow(o, x, t, params=params)
      return flows.flow_matching_loss(field, batch["observations"], batch["actions"], key,
                                      weights=batch.get("weights"))

    loss, grads = jax.value_and_grad(loss_fn)(self.flow.params)
    updates, flow_opt_state = optax.adam(self.config.lr).update(grads, self.flow_opt_state)
    flow = self.flow.replace(params=optax.apply_updates(self.flow.params, updates))
    return self.replace(rng=rng, flow=flow, flow_opt_state=flow_opt_state), {"flow/loss": loss}

  def behavior_log_prob(self, obs: jax.Array, actions: jax.Array,
                        key: jax.Array | None = None) -> jax.Array:
    """``log beta(a | s)`` under the frozen flow, ``(B,)``."""
    cfg = self.config
    return flows.log_prob(self.flow, obs, actions, num_steps=cfg.flow_steps,
                          divergence=cfg.divergence, key=key, num_probes=cfg.num_probes)

  def flow_actions(self, obs: jax.Array, noise: jax.Array) -> jax.Array:
    """Behavior-flow samples from ``noise``, clipped to the action box."""
    return jnp.clip(flows.euler_sample(self.flow, obs, noise, self.config.flow_steps), -1, 1)

  # -- actor-critic -----------------------------------------------------------
  def penalty_weight(self, lp_pi: jax.Array, lp_eps: jax.Array) -> jax.Array:
    """``w`` from ``log beta(a_pi|s)`` and the threshold ``log eps`` (FAC's weight family)."""
    ratio_log = lp_pi - lp_eps
    if self.config.weight == "linear":
      return jnp.clip(1.0 - jnp.exp(ratio_log), 0.0, 1.0)
    tau = self.config.weight_tau
    return jnp.clip(1.0 - jnp.log1p(jnp.exp(tau * ratio_log)) / math.log(2.0), 0.0, 1.0)

  def _threshold(self, batch: common.Batch) -> jax.Array:
    kind = self.config.threshold
    if kind == "dataset_min":
      return jnp.broadcast_to(self.log_prob_min, batch["rewards"].shape)
    lp = batch["log_prob"]
    return lp if kind == "batch_adaptive" else jnp.broadcast_to(jnp.min(lp), lp.shape)

  def losses(self, params: dict[str, Any], batch: common.Batch, keys: tuple[jax.Array, ...]
             ) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Critic + actor loss of one batch, ``(loss, info)``; ``params`` = {"critic", "actor"}."""
    cfg = self.config
    k_next, k_pi, k_actor, k_div = keys
    obs, actions = batch["observations"], batch["actions"]
    pi = lambda o, z, p: jnp.clip(self.actor(o, z, params=p), -1, 1)
    noise = lambda k: jax.random.normal(k, actions.shape, actions.dtype)

    # Critic: TD error (target actions from the current actor, no gradient).
    next_a = pi(batch["next_observations"], noise(k_next), jax.lax.stop_gradient(params["actor"]))
    td_loss, qs = common.critic_td_loss(self.critic, params["critic"], self.target_critic, batch,
                                        next_a, cfg.discount, cfg.q_agg)
    info = {"critic/td_loss": td_loss, "critic/q_data_mean": qs.mean()}

    # Critic penalty on the actor's actions, weighted by the behavior density.
    a_pi = jax.lax.stop_gradient(pi(obs, noise(k_pi), params["actor"]))
    q_pi = self.critic(obs, a_pi, params=params["critic"]).mean(axis=0)
    penalty = jnp.zeros(())
    if cfg.alpha > 0:
      with jax.named_scope("density"):  # profiler label (experiments/bench_flow_actor_critic)
        lp_pi = jax.lax.stop_gradient(self.behavior_log_prob(obs, a_pi, k_div))
      w = jax.lax.stop_gradient(self.penalty_weight(lp_pi, self._threshold(batch)))
      penalty = cfg.alpha * jnp.mean(w * q_pi)
      info.update({"penalty/w_mean": w.mean(), "penalty/log_beta_pi": lp_pi.mean()})
    info.update(common.q_stats("critic", q_pi))

    # Actor: distillation towards the frozen flow + Q maximization.
    z = noise(k_actor)
    a_actor = self.actor(obs, z, params=params["actor"])
    q_loss = common.actor_q_loss(self.critic, params["critic"], obs, a_actor, cfg.normalize_q_loss)
    distill = jnp.zeros(())
    if cfg.distill > 0:
      with jax.named_scope("distillation"):  # the frozen flow's Euler samples (profiler label)
        target = jax.lax.stop_gradient(self.flow_actions(obs, z))
      distill = jnp.mean((a_actor - target) ** 2)
    actor_loss = cfg.distill * distill + q_loss
    info.update({"actor/loss": actor_loss, "actor/distill": distill, "actor/q_loss": q_loss,
                 "actor/action_abs": jnp.abs(a_actor).mean(),
                 "critic/penalty": penalty})
    return td_loss + penalty + actor_loss, info

  def update(self, batch: common.Batch) -> tuple[FACAgent, dict[str, jax.Array]]:
    """One actor-critic step (stage 2); ``batch["log_prob"]`` holds the cached densities."""
    rng, *keys = split_key_data(self.rng, 5)
    params = {"critic": self.critic.params, "actor": self.actor.params}
    grads, info = jax.grad(self.losses, has_aux=True)(params, batch, tuple(keys))
    updates, opt_state = optax.adam(self.config.lr).update(grads, self.opt_state)
    params = optax.apply_updates(params, updates)
    critic = self.critic.replace(params=params["critic"])
    agent = self.replace(
        rng=rng, critic=critic, actor=self.actor.replace(params=params["actor"]),
        target_critic=common.polyak(self.target_critic, critic.params, self.config.tau),
        opt_state=opt_state)
    return agent, info

  def sample_actions(self, obs: jax.Array, key: jax.Array) -> jax.Array:
    """The one-step policy ``clip(pi(s, z))``, ``z ~ N(0, I)``; batched ``obs``."""
    noise = jax.random.normal(key, obs.shape[:-1] + (self.action_dim,), obs.dtype)
    return jnp.clip(self.actor(obs, noise), -1.0, 1.0)


def check_config(config: FACConfig) -> None:
  if not isinstance(config, FACConfig):
    raise TypeError(f"config must be a FACConfig, got {type(config).__name__}")
  common.check_common_config(config)
  if config.threshold not in THRESHOLDS:
    raise ValueError(f"config.threshold must be one of {THRESHOLDS}, got {config.threshold!r}")
  if config.weight not in WEIGHTS:
    raise ValueError(f"config.weight must be one of {WEIGHTS}, got {config.weight!r}")
  for net in ("critic", "actor", "flow"):
    own = getattr(config, f"{net}_hidden_dims")
    if own is not None and (not own or any(int(h) < 1 for h in own)):
      raise ValueError(f"config.{net}_hidden_dims must be None or positive widths, got {own!r}")
  if config.divergence not in flows.DIVERGENCES:
    raise ValueError(f"config.divergence must be one of {flows.DIVERGENCES}, "
                     f"got {config.divergence!r}")
  if config.alpha < 0 or config.distill < 0 or config.weight_tau <= 0:
    raise ValueError("config.alpha and config.distill must be >= 0 and weight_tau > 0, got "
                     f"{config.alpha}, {config.distill}, {config.weight_tau}")
  is_count = lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0
  steps = config.pretrain_steps
  if steps is not None and not is_count(steps):
    raise ValueError(f"config.pretrain_steps must be None (from pretrain_epochs and the dataset "
                     f"size) or an int >= 0, got {steps!r}")
  epochs = config.pretrain_epochs
  if not is_count(epochs):
    raise ValueError(f"config.pretrain_epochs must be an int >= 0, got {epochs!r}")
  if not isinstance(config.pretrain_shuffle, bool):
    raise ValueError(f"config.pretrain_shuffle must be True or False, got "
                     f"{config.pretrain_shuffle!r}")


def get_config() -> FACConfig:
  """The default FAC configuration."""
  return FACConfig()
