"""DIPPER's preference pieces by hand, goal-conditioned SAC, and the HRL loop (resume included)."""

import dataclasses
import math
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from experiments import dipper as dipper_experiment
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
  # creation and value jitted too: op by op, each of their operations would compile alone
  agents = jax.jit(jax.vmap(lambda k: SACAgent.create(k, obs, goal, act, cfg)))(
      jax.random.split(jax.random.key(0), 2))
  rng = np.random.default_rng(0)
  batch = {"observations": rng.normal(size=(8, 5)), "goals": rng.normal(size=(8, 2)),
           "actions": rng.uniform(-1, 1, (8, 2)), "rewards": -np.ones(8),
           "next_observations": rng.normal(size=(8, 5)), "masks": np.ones(8)}
  batch = {k: jnp.asarray(v, jnp.float32) for k, v in batch.items()}
  new, info = jax.jit(jax.vmap(lambda a: a.update(batch)))(agents)
  assert all(np.all(np.isfinite(v)) for v in info.values())
  v = jax.jit(jax.vmap(lambda a: a.value(batch["observations"], batch["goals"],
                                          jax.random.key(1))))(new)
  assert v.shape == (2, 8)
  with pytest.raises(TypeError, match="SACConfig"):
    SACAgent.create(0, obs, goal, act, dipper.DipperConfig())


def _tiny(agent):
  sac = SACConfig(hidden_dims=(16,), batch_size=16)
  return hrl.HRLConfig(agent=agent, subgoal_period=3, num_windows=4, num_envs=3, iterations=3,
                       iters_per_chunk=1, low_updates=2, high_updates=2, buffer_episodes=8,
                       eval_envs=2, low=sac, high=sac,
                       dipper=dipper.DipperConfig(hidden_dims=(16,), batch_size=4, m=1))


class _Run(NamedTuple):
  env: envs.PointMaze
  config: hrl.HRLConfig
  train: object  # hrl.make_train's train (with .rollout)
  keys: jax.Array
  state: hrl.HRLState
  history: dict


@pytest.fixture(scope="module")
def maze_dipper() -> _Run:
  """One small DIPPER run on PointMaze (two seeds, five iterations, uninterrupted).

  Compiling a training chunk is most of what these tests cost (running one takes
  milliseconds), so the tests that need a trained DIPPER share this run (and its compiled
  ``train``): the loop-and-resume test, the eval_high test (its "mean" side) and the
  rollout-modes test. Its configuration is the DIPPER experiment's smoke one, so its chunk
  is the same compiled program as the experiment's --diagnose-eval smoke run and its
  notebook's demo (the suite's persistent compilation cache compiles it once).
  """
  env = envs.PointMaze()
  config = dataclasses.replace(
      dipper_experiment.hrl_config("dipper", "maze", dipper_experiment.CONFIGS["smoke"]),
      iterations=5)
  assert (config.num_envs, config.subgoal_period * config.num_windows,
          config.buffer_episodes, config.iters_per_chunk) == (4, 225, 16, 1)
  train = hrl.make_train(env, env.default_params, config)
  keys = jax.random.split(jax.random.key(3), 2)
  state, history = train(keys)
  return _Run(env, config, train, keys, state, history)


def test_dipper_loop_runs_and_resumes_exactly(maze_dipper, tmp_path):
  train, keys, state, history = (maze_dipper.train, maze_dipper.keys, maze_dipper.state,
                                 maze_dipper.history)
  assert history["env_steps"][:, 0].tolist() == [900, 1800, 2700, 3600, 4500]  # 4 x 225 each
  assert history["eval/success"].shape == (5, 2)
  for key in ("eval/subgoal_distance", "eval/lower_q", "eval/subgoal_step", "high/dpo_loss"):
    assert np.all(np.isfinite(history[key]))
  # the ring buffer (16 episodes) is full after 20 and writes next at 20 mod 16
  assert state.buffer.size.tolist() == [16, 16] and state.buffer.ptr.tolist() == [4, 4]
  train(keys, checkpoint_dir=str(tmp_path), stop_after=1)
  resumed, history2 = train(keys, checkpoint_dir=str(tmp_path))
  chex.assert_trees_all_equal(resumed, state)
  for k in history:
    np.testing.assert_array_equal(history2[k], history[k])
  # A checkpoint of another run is refused, naming the field (it was resumed silently).
  with pytest.raises(ValueError, match=r"run\.keys"):
    train(jax.random.split(jax.random.key(4), 2), checkpoint_dir=str(tmp_path))
  env = maze_dipper.env
  other = hrl.make_train(env, env.default_params,
                         dataclasses.replace(maze_dipper.config, iterations=6))
  with pytest.raises(ValueError, match=r"run\.config\.iterations is 5 there, 6 now"):
    other(keys, checkpoint_dir=str(tmp_path))


def test_eval_high_sample_changes_only_the_evaluation(maze_dipper):
  # eval_high="sample" evaluates the stochastic high level: the same training (same keys,
  # same losses and training episodes), different evaluation subgoals
  env, mean = maze_dipper.env, maze_dipper.history
  _, samp = hrl.make_train(env, env.default_params,
                           dataclasses.replace(maze_dipper.config, eval_high="sample"))(
                               maze_dipper.keys)
  for k in ("train/success", "high/dpo_loss", "low/critic_loss"):
    np.testing.assert_array_equal(samp[k], mean[k])
  assert not np.allclose(samp["eval/subgoal_step"], mean["eval/subgoal_step"])


def test_rollout_high_modes(maze_dipper):
  # one trained-from-scratch seed: "mean" subgoals are tanh of the policy mean, "sample"
  # and "uniform" differ from it; the low level's determinism is its own switch
  cfg, train = maze_dipper.config, maze_dipper.train
  low, high = jax.tree.map(lambda x: x[0], (maze_dipper.state.low, maze_dipper.state.high))
  key = jax.random.key(7)

  # the choices made at run time instead: (index into HIGH_MODES, low deterministic)
  run_time = (jnp.array([0, 1, 2, 0], jnp.int32), jnp.array([True, True, True, False]))

  @jax.jit  # every mode in one compiled program; each mode is still static in its rollout
  def episodes(key, low, high, run_time):
    ep = {m: train.rollout(key, low, high, m, True)[0] for m in hrl.HIGH_MODES}
    chosen = jax.lax.map(lambda mode: train.rollout(key, low, high, *mode)[0], run_time)
    return ep, train.rollout(key, low, high, "mean", False)[0], chosen

  ep, stoch, chosen = episodes(key, low, high, run_time)
  # one rollout choosing at run time gives exactly the static choice's episode
  for i, want in enumerate([ep["mean"], ep["sample"], ep["uniform"], stoch]):
    chex.assert_trees_all_equal(jax.tree.map(lambda x, i=i: x[i], chosen), want)
  obs = ep["mean"]["obs"][:: cfg.subgoal_period][: cfg.num_windows]
  goal = jnp.broadcast_to(ep["mean"]["desired"], obs.shape[:1] + ep["mean"]["desired"].shape)
  np.testing.assert_allclose(ep["mean"]["high_act"],
                             high.sample_actions(obs, goal, key, True), atol=1e-6)
  for m in ("sample", "uniform"):
    assert not np.allclose(ep[m]["high_act"], ep["mean"]["high_act"])
  assert not np.allclose(stoch["act"], ep["mean"]["act"])
  with pytest.raises(ValueError, match="high_mode"):
    train.rollout(key, low, high, "mode", True)
  with pytest.raises(TypeError, match="high_mode"):
    train.rollout(key, low, high, 0.5, True)


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
  with pytest.raises(ValueError, match="eval_high"):
    hrl.make_train(envs.PointMaze(), envs.MazeParams(), hrl.HRLConfig(eval_high="mode"))


# -- DIPPER's and HER's relabelling on hand-built episodes -----------------------------------
# Two stored episodes of T = 6 steps in H = 3 windows of c = 2 steps, goals on the x axis,
# threshold 0.5; a third ring-buffer slot holds NaN (never stored: sampling it is a bug).
# Observations encode (episode, step) so a sampled row says where it came from.
THR = 0.5
ACH_X = np.array([[0, 1, 2, 3, 4, 5, 6],     # episode 0 walks right; window ends 2, 4, 6
                  [0, 0, 0, 2, 2, 4, 4]],    # episode 1: window ends 0, 2, 4
                 np.float32)
SUB_X = np.array([10.0, 20.0], np.float32)  # the goal each episode's low level pursued
DESIRED_X = np.array([6.0, 5.8], np.float32)
HIGH_ACT = np.array([[[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]],
                     [[0.5, 0.0], [-0.5, 0.0], [0.0, 0.0]]], np.float32)


def _x_axis(x):
  return np.stack([x, np.zeros_like(x)], -1)


def _buffer():
  e, t = np.meshgrid(np.arange(2), np.arange(7), indexing="ij")
  obs = np.stack([e, t], -1).astype(np.float32)  # obs[e, t] = (e, t)
  sub = np.broadcast_to(SUB_X[:, None], (2, 6))
  nan = lambda x: np.concatenate([x, np.full((1,) + x.shape[1:], np.nan, np.float32)])
  return hrl.Buffer(
      obs=jnp.asarray(nan(obs)), ach=jnp.asarray(nan(_x_axis(ACH_X))),
      act=jnp.asarray(nan(obs[:, :6] / 10)), sub=jnp.asarray(nan(_x_axis(sub))),
      high_act=jnp.asarray(nan(HIGH_ACT)), desired=jnp.asarray(nan(_x_axis(DESIRED_X))),
      ptr=jnp.int32(2), size=jnp.int32(2))


def test_future_index_is_uniform_over_later_steps():
  got = hrl.future_index(jnp.array([0, 0, 4, 5]), jnp.array([0.0, 0.999, 0.5, 0.0]), 6)
  np.testing.assert_array_equal(got, [1, 6, 6, 6])
  u = (jnp.arange(400) + 0.5) / 400  # evenly spread u: every later step exactly equally often
  counts = np.bincount(np.asarray(hrl.future_index(jnp.full(400, 2), u, 6)), minlength=7)
  np.testing.assert_array_equal(counts, [0, 0, 0, 100, 100, 100, 100])


def test_low_level_hindsight_relabelling_by_hand():
  e, t = jnp.array([0, 0, 1, 1]), jnp.array([0, 2, 3, 5])
  batch = hrl.low_batch(_buffer(), e, t, future=jnp.array([1, 6, 4, 6]),
                        her=jnp.array([True, False, True, False]), threshold=THR)
  # goals: achieved x at the future step (HER rows) or the pursued subgoal (others)
  np.testing.assert_array_equal(batch["goals"][:, 0], [1.0, 10.0, 2.0, 20.0])
  # reward -1[|x_{t+1} - goal| > 0.5]: x_1 = 1 (goal 1), x_3 = 3 (10), x_4 = 2 (2), x_6 = 4 (20)
  np.testing.assert_array_equal(batch["rewards"], [0.0, -1.0, 0.0, -1.0])
  np.testing.assert_array_equal(batch["observations"], [[0, 0], [0, 2], [1, 3], [1, 5]])
  np.testing.assert_array_equal(batch["next_observations"], [[0, 1], [0, 3], [1, 4], [1, 6]])
  np.testing.assert_array_equal(batch["actions"], np.array([[0, 0], [0, 2], [1, 3], [1, 5]],
                                                           np.float32) / 10)


def test_high_level_hindsight_relabelling_by_hand():
  batch = hrl.high_batch(_buffer(), jnp.array([0, 1]), jnp.array([0, 1]),
                         future=jnp.array([1, 3]), her=jnp.array([True, False]), threshold=THR)
  # row 0: goal = x at the end of window 0 (step 2) = 2; window 0 visits x = 1, 2 -> -1
  # row 1: goal = the task goal 5.8; window 1 of episode 1 visits x = 2, 2 -> -2
  np.testing.assert_array_equal(batch["goals"][:, 0], np.float32([2.0, 5.8]))
  np.testing.assert_array_equal(batch["rewards"], [-1.0, -2.0])
  np.testing.assert_array_equal(batch["observations"], [[0, 0], [1, 2]])  # window starts
  np.testing.assert_array_equal(batch["next_observations"], [[0, 2], [1, 4]])
  np.testing.assert_array_equal(batch["actions"], [HIGH_ACT[0, 0], HIGH_ACT[1, 1]])


def test_shared_goal_relabelling_and_labels_by_hand():
  pairs = hrl.preference_pairs(
      _buffer(), e1=jnp.array([0, 1, 0, 1]), e2=jnp.array([1, 0, 1, 0]),
      end=jnp.array([2, 1, 3, 3]), relabel=jnp.array([True, True, False, False]), threshold=THR)
  # Shared goal: e1's x at the end of window `end` (steps 2, 4, 6), or e1's task goal.
  np.testing.assert_array_equal(pairs["goal"][:, 0], np.float32([4.0, 0.0, 6.0, 5.8]))
  # Window ends: episode 0 at x = 2, 4, 6; episode 1 at x = 0, 2, 4. Ends within 0.5:
  #   goal 4:   ep0 1, ep1 1 -> tie;  goal 0: ep1 1, ep0 0 -> e1 (ep1) preferred;
  #   goal 6:   ep0 1, ep1 0 -> e1;   goal 5.8: ep1 0, ep0 1 -> e2 preferred.
  np.testing.assert_array_equal(pairs["label"], [0.5, 1.0, 1.0, 0.0])
  np.testing.assert_array_equal(pairs["obs1"][0], [[0, 0], [0, 2], [0, 4]])  # window starts
  np.testing.assert_array_equal(pairs["obs2"][0], [[1, 0], [1, 2], [1, 4]])
  np.testing.assert_array_equal(pairs["act1"], HIGH_ACT[[0, 1, 0, 1]])
  np.testing.assert_array_equal(pairs["act2"], HIGH_ACT[[1, 0, 1, 0]])


class _FakeLow(NamedTuple):
  """V(s, g) = w * 10 g_x + s_0 + noise(key): the gap to w = 0 is 10 w g_x iff one key."""

  w: jax.Array

  def value(self, obs, goal, key):
    return self.w * 10.0 * goal[:, 0] + obs[:, 0] + jax.random.normal(key, obs.shape[:1])


def test_value_gap_by_hand():
  obs = jnp.asarray(np.stack([np.arange(3.0)] * 2, -1)[None].repeat(2, 0))  # (B=2, H=3, 2)
  act = jnp.asarray(HIGH_ACT)  # subgoal g = (a + 1) / 2: x = 0, 0.5, 1 and 0.75, 0.25, 0.5
  gap = hrl.value_gap(_FakeLow(jnp.float32(1.0)), _FakeLow(jnp.float32(0.0)), obs, act,
                      jax.random.key(0))
  np.testing.assert_allclose(gap, [[0.0, 5.0, 10.0], [7.5, 2.5, 5.0]], atol=1e-5)
  # No gradient flows through the gap (it only shifts each pair's logit).
  grad = jax.grad(lambda w: hrl.value_gap(_FakeLow(w), _FakeLow(0.0), obs, act,
                                          jax.random.key(0)).sum())(jnp.float32(1.0))
  assert float(grad) == 0.0


def _numpy_scores(e, goal_x):
  """-(number of window ends farther than THR from the goal), per row."""
  ends = ACH_X[e][:, [2, 4, 6]]
  return -np.sum(np.abs(ends - goal_x[:, None]) > THR, axis=1)


@pytest.mark.parametrize("relabel_prob", [0.0, 1.0])
def test_pair_sampler_on_hand_built_buffer(relabel_prob):
  n = 256
  pairs = jax.jit(hrl.sample_pairs, static_argnums=4)(
      _buffer(), jax.random.key(1), _FakeLow(jnp.float32(1.0)), _FakeLow(jnp.float32(0.0)), n,
      relabel_prob, THR)
  assert all(np.all(np.isfinite(v)) for v in pairs.values())  # never the unstored slot
  e1 = np.asarray(pairs["obs1"][:, 0, 0]).astype(int)
  e2 = np.asarray(pairs["obs2"][:, 0, 0]).astype(int)
  assert set(e1) == set(e2) == {0, 1}
  goal = np.asarray(pairs["goal"][:, 0])
  if relabel_prob == 1.0:  # e1's achieved x at one of its window ends, each end drawn
    ends = ACH_X[e1][:, [2, 4, 6]]
    hits = ends == goal[:, None]
    assert np.all(hits.any(1))
    assert {2.0, 4.0, 6.0} <= set(goal[e1 == 0])
  else:
    np.testing.assert_array_equal(goal, DESIRED_X[e1])
  s1, s2 = _numpy_scores(e1, goal), _numpy_scores(e2, goal)
  want = np.where(s1 > s2, 1.0, np.where(s1 < s2, 0.0, 0.5))
  np.testing.assert_array_equal(pairs["label"], want)
  np.testing.assert_allclose(pairs["dv1"], 5.0 * (HIGH_ACT[e1][..., 0] + 1), atol=1e-5)
  np.testing.assert_allclose(pairs["dv2"], 5.0 * (HIGH_ACT[e2][..., 0] + 1), atol=1e-5)


@pytest.mark.parametrize("her_prob", [0.0, 1.0])
def test_low_sampler_on_hand_built_buffer(her_prob):
  batch = jax.jit(hrl.sample_low, static_argnums=2)(_buffer(), jax.random.key(2), 256,
                                                     her_prob, THR)
  assert all(np.all(np.isfinite(v)) for v in batch.values())
  e, t = (np.asarray(batch["observations"][:, i]).astype(int) for i in (0, 1))
  assert set(e) == {0, 1} and set(t) == set(range(6))
  goal = np.asarray(batch["goals"][:, 0])
  if her_prob == 1.0:  # an achieved x strictly after t
    after = (ACH_X[e] == goal[:, None]) & (np.arange(7)[None, :] > t[:, None])
    assert np.all(after.any(1))
  else:
    np.testing.assert_array_equal(goal, SUB_X[e])
  want = -(np.abs(ACH_X[e, t + 1] - goal) > THR).astype(np.float32)
  np.testing.assert_array_equal(batch["rewards"], want)
