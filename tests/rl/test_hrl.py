"""DIPPER's preference pieces by hand, goal-conditioned SAC, and the HRL loop (resume included)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from jaxlab import envs
from jaxlab.rl import hrl
from jaxlab.rl.agents import dipper
from jaxlab.rl.agents.gcsac import (
    SACAgent,
    SACConfig,
    tanh_gaussian_log_prob,
    tanh_gaussian_sample,
)


def test_window_scores_and_labels_by_hand():
  goal = jnp.array([0.0, 0.0])
  ends = jnp.array([[[0.05, 0.0], [0.5, 0.0], [0.0, 0.01]],   # 2 of 3 windows end at the goal
                    [[1.0, 1.0], [0.5, 0.0], [0.0, 0.09]]])   # 1 of 3
  scores = dipper.window_scores(ends, goal, 0.1)
  np.testing.assert_array_equal(scores, [-1.0, -2.0])
  np.testing.assert_array_equal(dipper.preference_labels(jnp.array([-1.0, -2.0, -3.0]),
                                                         jnp.array([-2.0, -2.0, -1.0])),
                                [1.0, 0.5, 0.0])


def test_dpo_logits_and_loss_by_hand():
  lp1, lp2 = jnp.array([[0.5, -1.0]]), jnp.array([[0.0, -2.0]])
  dv1, dv2 = jnp.array([[0.2, 0.0]]), jnp.array([[0.0, 0.1]])
  z = dipper.dpo_logits(lp1, lp2, dv1, dv2, beta=2.0, lam=3.0)
  # 2 * (0.5 - 0) + 2 * (-1 + 2) - 3 * (0.2 - 0) - 3 * (0 - 0.1) = 1 + 2 - 0.6 + 0.3
  np.testing.assert_allclose(z, [2.7], rtol=1e-6)
  np.testing.assert_allclose(dipper.dpo_loss(jnp.array([2.7]), jnp.array([1.0])),
                             math.log1p(math.exp(-2.7)), rtol=1e-6)
  np.testing.assert_allclose(dipper.dpo_loss(jnp.zeros(3), jnp.array([1.0, 0.5, 0.0])),
                             math.log(2.0), rtol=1e-6)


def test_tanh_gaussian_density_matches_change_of_variables():
  mean, log_std = jnp.array([[0.3]]), jnp.array([[-0.5]])
  a = jnp.array([[0.6]])
  want = norm(0.3, math.exp(-0.5)).logpdf(np.arctanh(0.6)) - math.log(1 - 0.6**2)
  np.testing.assert_allclose(tanh_gaussian_log_prob(mean, log_std, a), [want], rtol=1e-5)
  x, logp = tanh_gaussian_sample(mean, log_std, jax.random.key(0))
  np.testing.assert_allclose(logp, tanh_gaussian_log_prob(mean, log_std, x), rtol=1e-4)


def test_sac_update_jits_and_vmaps():
  obs, goal, act = jnp.zeros((1, 5)), jnp.zeros((1, 2)), jnp.zeros((1, 2))
  cfg = SACConfig(hidden_dims=(16,), batch_size=8)
  agents = jax.vmap(lambda k: SACAgent.create(k, obs, goal, act, cfg))(
      jax.random.split(jax.random.key(0), 2))
  rng = np.random.default_rng(0)
  batch = {"observations": rng.normal(size=(8, 5)), "goals": rng.normal(size=(8, 2)),
           "actions": rng.uniform(-1, 1, (8, 2)), "rewards": -np.ones(8),
           "next_observations": rng.normal(size=(8, 5)), "masks": np.ones(8)}
  batch = {k: jnp.asarray(v, jnp.float32) for k, v in batch.items()}
  new, info = jax.jit(jax.vmap(lambda a: a.update(batch)))(agents)
  assert all(np.all(np.isfinite(v)) for v in info.values())
  v = jax.vmap(lambda a: a.value(batch["observations"], batch["goals"], jax.random.key(1)))(new)
  assert v.shape == (2, 8)
  with pytest.raises(TypeError, match="SACConfig"):
    SACAgent.create(0, obs, goal, act, dipper.DipperConfig())


def _tiny(agent):
  sac = SACConfig(hidden_dims=(16,), batch_size=16)
  return hrl.HRLConfig(agent=agent, subgoal_period=3, num_windows=4, num_envs=3, iterations=3,
                       iters_per_chunk=1, low_updates=2, high_updates=2, buffer_episodes=8,
                       eval_envs=2, low=sac, high=sac,
                       dipper=dipper.DipperConfig(hidden_dims=(16,), batch_size=4, m=1))


def test_dipper_loop_runs_and_resumes_exactly(tmp_path):
  env = envs.PointPush()
  train = hrl.make_train(env, env.default_params, _tiny("dipper"))
  keys = jax.random.split(jax.random.key(3), 2)
  state, history = train(keys)
  assert history["env_steps"][:, 0].tolist() == [36, 72, 108]
  assert history["eval/success"].shape == (3, 2)
  for key in ("eval/subgoal_distance", "eval/lower_q", "eval/subgoal_step", "high/dpo_loss"):
    assert np.all(np.isfinite(history[key]))
  assert int(state.buffer.size[0]) == 8  # ring buffer full after 9 episodes
  train(keys, checkpoint_dir=str(tmp_path), stop_after=1)
  resumed, history2 = train(keys, checkpoint_dir=str(tmp_path))
  for a, b in zip(jax.tree.leaves(resumed), jax.tree.leaves(state), strict=True):
    np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(history2["eval/success"], history["eval/success"])


def test_hier_trains_its_high_level_by_sac():
  env = envs.PointPush()
  cfg = dataclasses.replace(_tiny("hier"), iterations=1)
  state, history = hrl.make_train(env, env.default_params, cfg)(jax.random.split(
      jax.random.key(4), 1))
  assert np.all(np.isfinite(history["high/critic_loss"]))
  assert isinstance(state.high, SACAgent)


def test_bad_hrl_config():
  with pytest.raises(ValueError, match="agent"):
    hrl.make_train(envs.PointMaze(), envs.MazeParams(), hrl.HRLConfig(agent="hac"))
  with pytest.raises(ValueError, match="num_envs"):
    hrl.make_train(envs.PointMaze(), envs.MazeParams(), hrl.HRLConfig(num_envs=0))
