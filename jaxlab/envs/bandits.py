"""K-armed Bernoulli and Gaussian bandits with gymnax's API, arm means redrawn every episode.

gymnax's ``BernoulliBandit-misc`` and ``GaussianBandit-misc`` are meta-RL tasks with exactly
two arms; the bandits of "LLMs are Greedy Agents" (following BanditBench) have 5, 10 or 20
arms and a 50-step horizon. :class:`MultiArmedBandit` has ``num_arms`` arms (any ``K >= 2``;
the paper's are 5, 10, 20) whose means are drawn from the reset key:

* ``"bernoulli"``: ``mu_a ~ U(0, 1)`` i.i.d., reward ``r ~ Bernoulli(mu_a)``;
* ``"gaussian"``: ``mu_a ~ N(0, mean_scale^2)`` i.i.d., reward ``r ~ N(mu_a, noise^2)``
  (the paper's noise levels are a low, a unit and a high ``noise``).

The paper's instances are BanditBench's fixed configurations; drawing the means per
episode (uniform / standard normal) is our stand-in, so a policy is evaluated over a
distribution of instances. An action outside ``{0, ..., K-1}`` (an unparseable output of a
language agent) pulls no arm: reward 0, ``info["invalid_action"]`` set, and the step's
regret is counted as the worst arm's, ``max(mu) - min(mu)``.

::

  env = MultiArmedBandit()
  params = BanditParams(num_arms=10, kind="gaussian")
  obs, state = env.reset(key, params)
  obs, state, reward, terminated, truncated, info = env.step(key, state, action, params)

``info`` holds the step's ``regret`` (``max(mu) - mu_a``), ``best_arm`` and
``invalid_action``; the observation is ``(last action, last reward, time)`` as in gymnax's
bandits. :func:`arm_means` and :func:`pull` are the environment's pieces as pure functions
for agents that roll out many episodes in a ``lax.scan``.

References:
  Schmied et al., "LLMs are Greedy Agents: Effects of RL Fine-tuning on Decision-Making
  Abilities", arXiv:2504.16078 (ICLR 2026).
  Nie et al., "EVOLvE: Evaluating and Optimizing LLMs for Exploration" (BanditBench),
  arXiv:2410.06238, 2024.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

KINDS = ("bernoulli", "gaussian")
HORIZON = 50  # the paper's episode length


@struct.dataclass
class BanditState(environment.EnvState):
  means: jax.Array  # (K,) this episode's arm means
  last_action: int
  last_reward: float
  time: int


@struct.dataclass
class BanditParams(environment.EnvParams):
  num_arms: int = struct.field(pytree_node=False, default=5)  # K (static: sets shapes)
  kind: str = struct.field(pytree_node=False, default="bernoulli")  # "bernoulli" / "gaussian"
  noise: float = 1.0  # Gaussian reward std (unused by Bernoulli arms)
  mean_scale: float = 1.0  # Gaussian arm means ~ N(0, mean_scale^2)
  max_steps_in_episode: int = HORIZON

  def __post_init__(self):
    if not isinstance(self.num_arms, int) or isinstance(self.num_arms, bool) or self.num_arms < 2:
      raise ValueError(f"num_arms must be an int >= 2, got {self.num_arms!r}")
    if self.kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
    for name in ("noise", "mean_scale"):
      v = getattr(self, name)
      if isinstance(v, (int, float)) and not v > 0:
        raise ValueError(f"{name} must be > 0, got {v!r}")


def arm_means(key: jax.Array, params: BanditParams) -> jax.Array:
  """One episode's arm means ``(K,)``: ``U(0, 1)`` (Bernoulli) or ``N(0, mean_scale^2)``."""
  if params.kind == "bernoulli":
    return jax.random.uniform(key, (params.num_arms,))
  return params.mean_scale * jax.random.normal(key, (params.num_arms,))


def prior_mean(params: BanditParams) -> float:
  """The mean of the arm-mean distribution (0.5 for Bernoulli arms, 0 for Gaussian ones)."""
  return 0.5 if params.kind == "bernoulli" else 0.0


def pull(key: jax.Array, means: jax.Array, action: jax.Array, params: BanditParams
         ) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``(reward, regret, valid)`` of pulling ``action`` (an int; outside ``[0, K)``: no arm,
  reward 0, the worst arm's regret)."""
  action = jnp.asarray(action)
  valid = (action >= 0) & (action < params.num_arms)
  a = jnp.clip(action, 0, params.num_arms - 1).astype(jnp.int32)
  mu = means[a]
  if params.kind == "bernoulli":
    reward = jax.random.bernoulli(key, mu).astype(jnp.float32)
  else:
    reward = mu + params.noise * jax.random.normal(key, mu.shape)
  best = jnp.max(means)
  regret = jnp.where(valid, best - mu, best - jnp.min(means))
  return jnp.where(valid, reward, 0.0), regret, valid


class MultiArmedBandit(environment.Environment[BanditState, BanditParams]):
  """A K-armed Bernoulli or Gaussian bandit (see the module docstring)."""

  @property
  def default_params(self) -> BanditParams:
    return BanditParams()

  def step_env(self, key: jax.Array, state: BanditState, action: jax.Array,
               params: BanditParams):
    action = jnp.asarray(action)
    if action.shape != ():
      raise ValueError(f"action must be a scalar arm index, got shape {action.shape}")
    if not jnp.issubdtype(action.dtype, jnp.integer):
      raise TypeError(f"action must be an integer arm index, got dtype {action.dtype}")
    reward, regret, valid = pull(key, state.means, action, params)
    new_state = BanditState(means=state.means, last_action=action.astype(jnp.int32),
                            last_reward=reward, time=state.time + 1)
    info = {"regret": regret, "best_arm": jnp.argmax(state.means), "invalid_action": ~valid}
    # a bandit never terminates: the 50-step horizon is a truncation (gymnax's time limit)
    return self.get_obs(new_state), new_state, reward, jnp.asarray(False), info

  def reset_env(self, key: jax.Array, params: BanditParams):
    state = BanditState(means=arm_means(key, params), last_action=jnp.int32(-1),
                        last_reward=jnp.float32(0.0), time=0)
    return self.get_obs(state), state

  def get_obs(self, state: BanditState, params=None, key=None) -> jax.Array:
    return jnp.stack([jnp.asarray(state.last_action, jnp.float32),
                      jnp.asarray(state.last_reward, jnp.float32),
                      jnp.asarray(state.time, jnp.float32)])

  def is_terminal(self, state: BanditState, params: BanditParams) -> jax.Array:
    return jnp.asarray(state.time >= params.max_steps_in_episode)

  @property
  def name(self) -> str:
    return "MultiArmedBandit"

  @property
  def num_actions(self) -> int:
    """The default instance's arm count (``params.num_arms`` sets it per call)."""
    return self.default_params.num_arms

  def action_space(self, params: BanditParams | None = None) -> spaces.Discrete:
    return spaces.Discrete((params or self.default_params).num_arms)

  def observation_space(self, params: BanditParams | None = None) -> spaces.Box:
    return spaces.Box(-jnp.inf, jnp.inf, (3,), jnp.float32)
