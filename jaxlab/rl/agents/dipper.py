r"""DIPPER's high level: subgoals trained by DPO on sparse-reward preferences, plus a value term.

Two high-level episodes (their window-start states :math:`s_t`, proposed
subgoals :math:`g_t` and the states reached at the end of each window) are
compared after relabelling both to one shared final goal :math:`g^*`
(:func:`preference_labels`): each scores :math:`\sum_t -1[d(\text{end}_t, g^*) >
\text{thr}]`, the higher score is preferred, ties get 1/2. The loss is DPO
without a reference policy, with a per-pair shift built from the low level's
value :math:`V^L` and its value :math:`V^L_m` after ``m`` extra gradient steps
(the bilevel relaxation):

.. math::
  z = \sum_t \big[\beta \log\pi_H(g^1_t|s^1_t, g^*) - \beta \log\pi_H(g^2_t|s^2_t, g^*)
      - \lambda\, \Delta V_t\big], \quad
  \Delta V_t = (V^L - V^L_m)(s^1_t, g^1_t) - (V^L - V^L_m)(s^2_t, g^2_t),

  L = -\mathbb E\,[\, y \log\sigma(z) + (1 - y) \log\sigma(-z) \,].

The value terms carry no gradient to :math:`\pi_H`; they shift each pair's
logit. ``lam = 0`` is the "DIPPER without V" ablation. The agent holds
:math:`\lambda` as a run-time value (``DipperHigh.lam``, set from
``DipperConfig.lam`` by ``create``), so one compiled training program serves
every lambda of a sweep.

References:
  Singh et al., "Direct Preference Optimization for Primitive-Enabled
  Hierarchical RL: A Bilevel Approach", arXiv:2411.00361 (ICLR 2026).
  Rafailov et al., "Direct Preference Optimization", arXiv:2305.18290, 2023.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from jaxlab.core.rng import as_key_data, split_key_data
from jaxlab.nn import Net
from jaxlab.rl.agents import common
from jaxlab.rl.agents.gcsac import TanhGaussianPolicy, tanh_gaussian_log_prob, tanh_gaussian_sample


def window_scores(window_ends: jax.Array, goal: jax.Array, threshold: float) -> jax.Array:
  """``sum_t -1[||end_t - g*|| > thr]``: ``(..., H, d)`` ends, ``(..., d)`` goal -> ``(...)``."""
  far = jnp.linalg.norm(window_ends - goal[..., None, :], axis=-1) > threshold
  return -jnp.sum(far.astype(jnp.float32), axis=-1)


def preference_labels(score1: jax.Array, score2: jax.Array) -> jax.Array:
  """1 where episode 1 scores higher, 0 where lower, 1/2 on ties."""
  return jnp.where(score1 > score2, 1.0, jnp.where(score1 < score2, 0.0, 0.5))


def dpo_logits(logp1, logp2, dv1, dv2, beta: float, lam: jax.typing.ArrayLike) -> jax.Array:
  """Per-pair logit ``z``; ``logp*`` and ``dv*`` are ``(B, H)`` per-window terms."""
  return jnp.sum(beta * logp1 - beta * logp2 - lam * (dv1 - dv2), axis=-1)


def dpo_loss(z: jax.Array, y: jax.Array) -> jax.Array:
  """Soft-label logistic loss ``-[y log sigma(z) + (1 - y) log sigma(-z)]``, averaged."""
  return -jnp.mean(y * jax.nn.log_sigmoid(z) + (1.0 - y) * jax.nn.log_sigmoid(-z))


@dataclasses.dataclass(frozen=True)
class DipperConfig:
  """DIPPER high-level hyperparameters."""

  lr: float = 3e-4  # Adam
  batch_size: int = 64  # preference pairs per update
  hidden_dims: tuple[int, ...] = (128, 128)  # policy MLP
  beta: float = 1.0  # DPO temperature
  lam: float = 1.0  # weight of the value term (0: DIPPER without V)
  m: int = 5  # extra low-level gradient steps that define V^L_m
  relabel_prob: float = 0.8  # relabel both episodes of a pair to a shared achieved goal


class DipperHigh(struct.PyTreeNode):
  """The high-level policy ``pi_H(subgoal | s, g*)`` trained by :func:`dpo_loss`."""

  rng: jax.Array
  policy: Net
  opt_state: Any
  lam: jax.Array  # float32 weight of the value term: config.lam, a traced value (not static)
  config: DipperConfig = struct.field(pytree_node=False)

  @classmethod
  def create(cls, seed: Any, example_obs: Any, example_goal: Any, subgoal_dim: int,
             config: DipperConfig = DipperConfig()) -> DipperHigh:
    if not isinstance(config, DipperConfig):
      raise TypeError(f"config must be a DipperConfig, got {type(config).__name__}")
    common.check_common_config(config)
    if config.beta <= 0 or config.lam < 0 or config.m < 0 or not 0 <= config.relabel_prob <= 1:
      raise ValueError("config needs beta > 0, lam >= 0, m >= 0, relabel_prob in [0, 1]; got "
                       f"{config.beta}, {config.lam}, {config.m}, {config.relabel_prob}")
    obs_dim, goal_dim = common.check_example(example_obs, example_goal)
    rng, k_policy = split_key_data(as_key_data(seed), 2)
    policy = Net.create(TanhGaussianPolicy(obs_dim + goal_dim, int(subgoal_dim),
                                           tuple(config.hidden_dims), rngs=nnx.Rngs(k_policy)))
    return cls(rng=rng, policy=policy, opt_state=optax.adam(config.lr).init(policy.params),
               lam=jnp.asarray(config.lam, jnp.float32), config=config)

  def get_config(self) -> dict[str, Any]:
    return common.config_dict(self.config)

  def log_prob(self, obs, goal, actions, params=None) -> jax.Array:
    """``log pi_H(a | s, g*)`` of subgoal actions in ``[-1, 1]``."""
    mean, log_std = self.policy(jnp.concatenate([obs, goal], -1), params=params)
    return tanh_gaussian_log_prob(mean, log_std, actions)

  def sample_actions(self, obs, goal, key, deterministic: bool = False) -> jax.Array:
    mean, log_std = self.policy(jnp.concatenate([obs, goal], -1))
    return jnp.tanh(mean) if deterministic else tanh_gaussian_sample(mean, log_std, key)[0]

  def update(self, pairs: dict[str, jax.Array]) -> tuple[DipperHigh, dict[str, jax.Array]]:
    """One DPO step on preference pairs.

    ``pairs``: ``obs1, obs2`` ``(B, H, obs_dim)``; ``act1, act2`` ``(B, H, k)``
    subgoal actions in [-1, 1]; ``goal`` ``(B, goal_dim)``; ``dv1, dv2``
    ``(B, H)``; ``label`` ``(B,)``.
    """
    cfg = self.config
    goal = jnp.broadcast_to(pairs["goal"][:, None, :],
                            pairs["obs1"].shape[:2] + pairs["goal"].shape[-1:])

    def loss_fn(params):
      lp1 = self.log_prob(pairs["obs1"], goal, pairs["act1"], params)
      lp2 = self.log_prob(pairs["obs2"], goal, pairs["act2"], params)
      z = dpo_logits(lp1, lp2, pairs["dv1"], pairs["dv2"], cfg.beta, self.lam)
      loss = dpo_loss(z, pairs["label"])
      agree = jnp.mean(jnp.where(pairs["label"] == 0.5, 1.0,
                                 ((z > 0) == (pairs["label"] > 0.5)).astype(jnp.float32)))
      return loss, {"high/dpo_loss": loss, "high/pref_accuracy": agree,
                    "high/logp": lp1.mean(), "high/dv_abs": jnp.abs(pairs["dv1"]).mean()}

    grads, info = jax.grad(loss_fn, has_aux=True)(self.policy.params)
    updates, opt_state = optax.adam(cfg.lr).update(grads, self.opt_state)
    policy = self.policy.replace(params=optax.apply_updates(self.policy.params, updates))
    return self.replace(policy=policy, opt_state=opt_state), info
