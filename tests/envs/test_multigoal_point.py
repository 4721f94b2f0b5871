"""The multi-goal point environment: dynamics, rewards, termination, vmap, dataset."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs


def test_arena_walls_block_motion():
  env = envs.MultiGoalPoint()
  params = env.default_params
  state = envs.EnvState(pos=jnp.array([0.98, 0.0]), time=0)
  obs, state, reward, terminated, truncated, _ = env.step(jax.random.key(0), state,
                                                          jnp.array([1.0, 0.0]), params)
  np.testing.assert_allclose(obs, [1.0, 0.0])
  assert float(reward) == -1.0 and not bool(terminated) and not bool(truncated)


def test_goal_gives_zero_reward_and_terminates():
  env = envs.MultiGoalPoint()
  params = env.default_params
  goal = np.asarray(params.goals[1])
  state = envs.EnvState(pos=jnp.asarray(goal - np.array([0.05, 0.0]), jnp.float32), time=3)
  _, _, reward, terminated, _, info = env.step(jax.random.key(0), state,
                                               jnp.array([1.0, 0.0]), params)
  assert float(reward) == 0.0 and bool(terminated)
  np.testing.assert_allclose(info["final_observation"], goal + [params.step_size - 0.05, 0.0],
                             atol=1e-6)


def test_time_limit_truncates():
  env = envs.MultiGoalPoint()
  params = env.default_params.replace(max_steps_in_episode=2)
  _, state = env.reset(jax.random.key(0), params)
  state = state.replace(time=1)
  *_, terminated, truncated, _ = env.step(jax.random.key(1), state, jnp.zeros(2), params)
  assert bool(truncated) and not bool(terminated)


def test_vmap_over_1000_envs():
  env = envs.MultiGoalPoint()
  keys = jax.random.split(jax.random.key(0), 1000)
  obs, states = jax.vmap(env.reset, (0, None))(keys, env.default_params)
  actions = jax.random.uniform(jax.random.key(1), (1000, 2), minval=-1, maxval=1)
  obs2, *_ = jax.jit(jax.vmap(env.step, (0, 0, 0, None)))(keys, states, actions,
                                                          env.default_params)
  assert obs2.shape == (1000, 2)
  assert np.all(np.linalg.norm(obs, axis=-1) <= env.default_params.start_radius + 1e-6)
  assert env.action_space(env.default_params).shape == (2,)


def test_dataset_is_consistent_and_multimodal():
  # 40 episodes, as the FAC tests and the smoke run: the same compiled rollout program
  data = envs.make_dataset(jax.random.key(0), 40)
  n = len(data["rewards"])
  assert all(len(v) == n for v in data.values())
  reached = data["masks"] == 0
  np.testing.assert_array_equal(data["rewards"][reached], 0.0)
  np.testing.assert_array_equal(data["rewards"][~reached], -1.0)
  assert np.all(data["terminals"][reached] == 1)
  # Next observation of a transition is the observation of the next one inside an episode.
  inside = data["terminals"][:-1] == 0
  np.testing.assert_allclose(data["next_observations"][:-1][inside],
                             data["observations"][1:][inside])
  # Near the start, the behavior heads to different goals: actions spread over directions.
  start = np.linalg.norm(data["observations"], axis=-1) < 0.25
  angles = np.arctan2(data["actions"][start, 1], data["actions"][start, 0])
  hist, _ = np.histogram(angles, bins=6, range=(-np.pi, np.pi))
  assert np.sum(hist > 0.1 * hist.sum()) >= 3


def test_nearest_goal_policy_beats_random():
  goals = envs.EnvParams().goals

  def nearest(obs, key):
    g = goals[jnp.argmin(jnp.linalg.norm(goals[None] - obs[:, None], axis=-1), axis=1)]
    return (g - obs) / jnp.linalg.norm(g - obs, axis=-1, keepdims=True)

  # jitted: op by op, each operation of the vmapped resets would compile on its own
  good = jax.jit(lambda key: envs.evaluate(key, nearest, 64))(jax.random.key(0))
  rand = jax.jit(lambda key: envs.evaluate(key, lambda o, k: jax.random.uniform(
      k, o.shape, minval=-1, maxval=1), 64))(jax.random.key(0))
  assert float(good["success"]) == 1.0 and float(rand["success"]) < 0.3
  assert float(good["return"]) > float(rand["return"])


def test_bad_dataset_size():
  with pytest.raises(ValueError, match="num_episodes"):
    envs.make_dataset(jax.random.key(0), 0)
