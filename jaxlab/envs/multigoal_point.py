"""A 2-D point that must reach any of several goals: sparse rewards, multimodal data.

The point lives in ``[-1, 1]^2`` and starts near the centre; an action in
``[-1, 1]^2`` moves it by ``step_size * action`` (clipped to the arena).
Reaching any goal disc ends the episode with reward 0; every other step
costs -1, so with discount gamma the true values lie in ``[-1/(1-gamma), 0]``
and any positive Q estimate is overestimation.

The scripted behavior (:func:`behavior_action`) heads for one goal chosen per
episode, re-chooses it with probability ``switch_prob`` per step and adds
Gaussian noise: from any state the dataset's actions split into one mode per
goal, the multimodal case where a Gaussian policy averages modes and a flow
policy does not. :func:`make_dataset` rolls it out into an offline dataset.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from gymnax.environments import environment, spaces

from jaxlab.envs.actions import check_action

GOALS = ((-0.7, 0.7), (0.7, 0.7), (0.0, -0.8))


@struct.dataclass
class EnvState(environment.EnvState):
  pos: jax.Array  # (2,)
  time: int


@struct.dataclass
class EnvParams(environment.EnvParams):
  goals: jax.Array = struct.field(default_factory=lambda: jnp.asarray(GOALS, jnp.float32))
  goal_radius: float = 0.12
  step_size: float = 0.06
  start_radius: float = 0.25
  max_steps_in_episode: int = 100


class MultiGoalPoint(environment.Environment[EnvState, EnvParams]):
  """Sparse-reward 2-D navigation to any of several goals (gymnax API)."""

  @property
  def default_params(self) -> EnvParams:
    return EnvParams()

  def step_env(self, key: jax.Array, state: EnvState, action: jax.Array, params: EnvParams):
    del key
    action, valid = check_action(action)
    move = params.step_size * jnp.clip(action, -1.0, 1.0)
    pos = jnp.clip(state.pos + move, -1.0, 1.0)
    reached = _in_goal(pos, params)
    new_state = EnvState(pos=pos, time=state.time + 1)
    reward = jnp.where(reached, 0.0, -1.0)
    return pos, new_state, reward, reached, {"success": reached, "invalid_action": ~valid}

  def reset_env(self, key: jax.Array, params: EnvParams):
    key_r, key_a = jax.random.split(key)
    radius = params.start_radius * jnp.sqrt(jax.random.uniform(key_r))
    angle = jax.random.uniform(key_a, minval=0.0, maxval=2 * jnp.pi)
    pos = radius * jnp.stack([jnp.cos(angle), jnp.sin(angle)])
    return pos, EnvState(pos=pos, time=0)

  def get_obs(self, state: EnvState, params=None, key=None) -> jax.Array:
    return state.pos

  def is_terminated(self, state: EnvState, params: EnvParams) -> jax.Array:
    return _in_goal(state.pos, params)

  @property
  def name(self) -> str:
    return "MultiGoalPoint"

  @property
  def num_actions(self) -> int:
    return 2

  def action_space(self, params: EnvParams | None = None) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (2,), jnp.float32)

  def observation_space(self, params: EnvParams | None = None) -> spaces.Box:
    return spaces.Box(-1.0, 1.0, (2,), jnp.float32)


def _in_goal(pos: jax.Array, params: EnvParams) -> jax.Array:
  d = jnp.linalg.norm(params.goals - pos[None, :], axis=-1)
  return jnp.any(d <= params.goal_radius)


@struct.dataclass
class BehaviorParams:
  """Scripted behavior: unit direction to the episode's goal plus noise."""

  noise: float = 0.5
  switch_prob: float = 0.05


def behavior_action(key: jax.Array, pos: jax.Array, goal: jax.Array,
                    behavior: BehaviorParams) -> jax.Array:
  direction = goal - pos
  direction = direction / jnp.maximum(jnp.linalg.norm(direction), 1e-6)
  return jnp.clip(direction + behavior.noise * jax.random.normal(key, (2,)), -1.0, 1.0)


def make_dataset(
    key: jax.Array,
    num_episodes: int,
    params: EnvParams | None = None,
    behavior: BehaviorParams | None = None,
) -> dict[str, np.ndarray]:
  """Rolls out the scripted behavior: an offline dataset of transitions.

  Returns a dict of float32 numpy arrays with FQL/OGBench's keys:
  ``observations``, ``actions``, ``rewards``, ``next_observations``,
  ``masks`` (0 at a goal, where the episode terminates; 1 at time-limit
  truncation) and ``terminals`` (1 on the last transition of an episode).
  """
  if not isinstance(num_episodes, int) or num_episodes < 1:
    raise ValueError(f"num_episodes must be a positive int, got {num_episodes!r}")
  env = MultiGoalPoint()
  params = env.default_params if params is None else params
  behavior = BehaviorParams() if behavior is None else behavior
  num_goals = params.goals.shape[0]

  def episode(key):
    key_reset, key_goal, key_steps = jax.random.split(key, 3)
    obs, state = env.reset_env(key_reset, params)
    goal = jax.random.randint(key_goal, (), 0, num_goals)

    def step(carry, key):
      obs, state, goal, alive = carry
      key_switch, key_new, key_act, key_env = jax.random.split(key, 4)
      switch = jax.random.uniform(key_switch) < behavior.switch_prob
      goal = jnp.where(switch, jax.random.randint(key_new, (), 0, num_goals), goal)
      action = behavior_action(key_act, obs, params.goals[goal], behavior)
      next_obs, next_state, reward, reached, _ = env.step_env(key_env, state, action, params)
      last = reached | (next_state.time >= params.max_steps_in_episode)
      record = dict(observations=obs, actions=action, rewards=reward,
                    next_observations=next_obs, masks=1.0 - reached.astype(jnp.float32),
                    terminals=last.astype(jnp.float32), valid=alive)
      return (next_obs, next_state, goal, alive & ~last), record

    keys = jax.random.split(key_steps, params.max_steps_in_episode)
    _, records = jax.lax.scan(step, (obs, state, goal, jnp.bool_(True)), keys)
    return records

  records = jax.jit(jax.vmap(episode))(jax.random.split(key, num_episodes))
  valid = np.asarray(records.pop("valid")).reshape(-1)
  return {k: np.asarray(v, np.float32).reshape((-1,) + v.shape[2:])[valid]
          for k, v in records.items()}


def evaluate(
    key: jax.Array, policy: Any, num_episodes: int, params: EnvParams | None = None
) -> dict[str, jax.Array]:
  """Runs ``policy(obs_batch, key) -> actions`` on ``num_episodes`` parallel episodes.

  Pure and jittable (vmap it over seeds). Returns the success rate (a goal
  reached before the time limit), the mean undiscounted return and the mean
  episode length.
  """
  env = MultiGoalPoint()
  params = env.default_params if params is None else params
  key_reset, key_run = jax.random.split(key)
  obs, state = jax.vmap(env.reset_env, (0, None))(jax.random.split(key_reset, num_episodes),
                                                  params)

  def step(carry, key):
    obs, state, done, ret, length = carry
    action = policy(obs, key)
    obs2, state2, reward, reached, _ = jax.vmap(env.step_env, (None, 0, 0, None))(
        key, state, action, params)
    alive = ~done
    ret = ret + jnp.where(alive, reward, 0.0)
    length = length + alive.astype(jnp.int32)
    # Freeze finished episodes where they ended.
    keep = lambda new, old: jnp.where(alive.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)
    return (keep(obs2, obs), jax.tree.map(keep, state2, state), done | reached, ret,
            length), None

  init = (obs, state, jnp.zeros(num_episodes, bool), jnp.zeros(num_episodes),
          jnp.zeros(num_episodes, jnp.int32))
  (_, _, done, ret, length), _ = jax.lax.scan(
      step, init, jax.random.split(key_run, params.max_steps_in_episode))
  return {"success": jnp.mean(done.astype(jnp.float32)), "return": jnp.mean(ret),
          "length": jnp.mean(length.astype(jnp.float32))}
