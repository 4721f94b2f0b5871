"""Greedy agents: the bandit metrics on scripted histories with hand-computed answers, UCB's
choices and regret against its known behaviour, the token layout, the rollout's bookkeeping
and the RLFT reward."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.agents import greedy as gr
from jaxlab.models import transformer as tfm


def test_coverage_and_regret_on_a_scripted_history():
  actions = jnp.array([0, 0, 1, -1, 0, 3])  # -1: an invalid action
  np.testing.assert_allclose(gr.coverage(actions, 4), [0.25, 0.25, 0.5, 0.5, 0.5, 0.75])
  means = jnp.array([0.2, 0.5, 0.9, 0.4])
  # per step: 0.7, 0.7, 0.4, worst arm 0.7, 0.7, 0.5
  np.testing.assert_allclose(gr.cumulative_regret(actions, means),
                             np.cumsum([0.7, 0.7, 0.4, 0.7, 0.7, 0.5]), rtol=1e-6)


def test_arm_statistics_and_prefixes():
  actions = jnp.array([1, 0, 1, -1, 2])
  rewards = jnp.array([1.0, 0.0, 0.5, 0.0, 2.0])
  counts, sums = gr.arm_stats(actions, rewards, 3)
  np.testing.assert_allclose(counts, [1, 2, 1])
  np.testing.assert_allclose(sums, [0.0, 1.5, 2.0])
  pc, ps = gr.prefix_stats(actions, rewards, 3)
  np.testing.assert_allclose(pc, [[0, 0, 0], [0, 1, 0], [1, 1, 0], [1, 2, 0], [1, 2, 0]])
  np.testing.assert_allclose(ps[3], [0.0, 1.5, 0.0])


@jax.jit
def _choices():
  # history: arms 0, 1, 2, 0 with rewards 1, 0, 1, 1 -> N = (2, 1, 1), means (1, 0, 1), t = 4
  counts, sums = gr.arm_stats(jnp.array([0, 1, 2, 0]), jnp.array([1.0, 0.0, 1.0, 1.0]), 3)
  return {"index": gr.ucb_index(counts, sums), "ucb1": gr.ucb_arm(counts, sums),
          "ucb_small_c": gr.ucb_arm(counts, sums, 0.1), "ucb_c0": gr.ucb_arm(counts, sums, 0.0),
          "greedy": gr.greedy_arm(counts, sums),
          "untried": gr.ucb_arm(jnp.array([1.0, 0.0, 3.0, 0.0]), jnp.array([1.0, 0.0, 3.0, 0.0])),
          "greedy_none": gr.greedy_arm(jnp.zeros(3), jnp.zeros(3)),
          "greedy_zero": gr.greedy_arm(jnp.array([0.0, 2.0, 0.0]), jnp.zeros(3))}


def test_ucb_and_greedy_choices_on_hand_built_histories():
  out = _choices()
  ln4 = math.log(4)
  expected = [1 + math.sqrt(2) * math.sqrt(ln4 / 2), math.sqrt(2 * ln4), 1 + math.sqrt(2 * ln4)]
  np.testing.assert_allclose(out["index"], expected, rtol=1e-6)
  assert int(out["ucb1"]) == 2
  # with c = 0.1 the bonus is small: arms 0 and 2 tie at mean 1, arm 2's bonus is larger
  assert int(out["ucb_small_c"]) == 2
  # with c = 0 UCB is greedy: ties go to the lowest arm
  assert int(out["ucb_c0"]) == 0 and int(out["greedy"]) == 0
  # an untried arm comes first, the lowest one
  assert int(out["untried"]) == 1
  assert int(out["greedy_none"]) == -1
  # greedy ignores untried arms even when every tried arm paid nothing
  assert int(out["greedy_zero"]) == 1


def test_knowing_doing_rates():
  out = gr.knowing_doing(rationales=jnp.array([0, 1, 2, 1]), actions=jnp.array([0, 2, 2, 1]),
                         ucb=jnp.array([0, 1, 0, 1]), greedy=jnp.array([1, 2, 2, 0]))
  assert float(out["rationale_correct"]) == pytest.approx(0.75)
  assert float(out["act_rationale_given_correct"]) == pytest.approx(2 / 3)
  assert float(out["act_greedy_given_correct"]) == pytest.approx(1 / 3)
  assert float(out["act_ucb"]) == pytest.approx(0.5)
  never = gr.knowing_doing(jnp.array([1, 1]), jnp.array([1, 1]), jnp.array([0, 0]),
                           jnp.array([0, 0]))
  assert float(never["rationale_correct"]) == 0 and np.isnan(never["act_rationale_given_correct"])


def test_frequency_bias_and_histories():
  probs = jnp.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
  out = gr.frequency_bias(probs, jnp.array([0, 2]))
  assert float(out["share"]) == pytest.approx(0.75)
  h = lambda p: -sum(x * math.log(x) for x in p)
  assert float(out["entropy"]) == pytest.approx((h([0.7, 0.2, 0.1]) + h([0.1, 0.1, 0.8])) / 2,
                                                rel=1e-5)
  assert float(gr.frequency_bias(jnp.eye(3), jnp.arange(3))["entropy"]) == 0.0
  params = envs.BanditParams(num_arms=4)
  actions, rewards, targets = gr.frequency_histories(jax.random.key(0), params, 50, 6)
  a = np.asarray(actions)
  assert a.shape == (50, 10) and rewards.shape == (50, 10)
  assert all(sorted(row[:4]) == [0, 1, 2, 3] for row in a)  # every arm once
  assert (a[:, 4:] == np.asarray(targets)[:, None]).all()
  assert set(np.unique(np.asarray(rewards))) <= {0.0, 1.0}
  with pytest.raises(ValueError, match="repeats"):
    gr.frequency_histories(jax.random.key(0), params, 5, -1)


@pytest.fixture(scope="module")
def two_armed():
  """UCB1 and random on a 2-armed Bernoulli instance with a big gap, means (0.9, 0.1)."""
  params = envs.BanditParams(num_arms=2, max_steps_in_episode=2000)
  means = jnp.tile(jnp.array([0.9, 0.1]), (32, 1))
  run = {p: gr.run_baseline(jax.random.key(0), params, p, 32, horizon=2000, means=means)
         for p in ("ucb", "random")}
  return {p: np.asarray(gr.cumulative_regret(t.actions, t.means)).mean(0)
          for p, t in run.items()}, run


def test_ucb_regret_is_logarithmic_and_random_is_linear(two_armed):
  regret, run = two_armed
  gap, horizon = 0.8, 2000
  # Auer et al. 2002, Theorem 1: E[R_T] <= 8 ln T / gap + (1 + pi^2 / 3) gap
  bound = 8 * math.log(horizon) / gap + (1 + math.pi ** 2 / 3) * gap
  assert regret["ucb"][-1] < bound
  # sublinear, of logarithmic order: quadrupling T from 500 to 2000 multiplies the regret by
  # about ln 2000 / ln 500 = 1.22, far from the 4 of linear growth
  growth = regret["ucb"][-1] / regret["ucb"][499]
  assert 1.0 < growth < 1.6
  # random pays gap / 2 per step
  assert regret["random"][-1] == pytest.approx(gap / 2 * horizon, rel=0.05)
  assert regret["random"][-1] / regret["random"][499] == pytest.approx(4.0, rel=0.1)
  # the bad arm is pulled O(log T / gap^2) times, UCB always names the arm it pulls
  bad = np.asarray(run["ucb"].actions == 1).sum(1).mean()
  assert bad < 8 * math.log(horizon) / gap ** 2 + 1 + math.pi ** 2 / 3
  assert (np.asarray(run["ucb"].actions) == np.asarray(run["ucb"].ucb)).all()
  with pytest.raises(ValueError, match="policy"):
    gr.run_baseline(jax.random.key(0), envs.BanditParams(), "thompson", 4)


def test_token_layout_and_loss_mask():
  spec = gr.TokenSpec(num_arms=3)
  assert (spec.arm0, spec.why0, spec.reward0, spec.vocab_size) == (2, 5, 8, 10)
  tokens = gr.episode_tokens(spec, jnp.array([[2, 0]]), jnp.array([[1, 1]]),
                             jnp.array([[1.0, 0.0]]))
  np.testing.assert_array_equal(tokens, [[1, 6, 4, 9, 6, 2, 8]])
  blank = gr.episode_tokens(spec, jnp.array([[2, 0]]), None, jnp.array([[1.0, 0.0]]))
  np.testing.assert_array_equal(blank, [[1, 0, 4, 9, 0, 2, 8]])
  np.testing.assert_array_equal(gr.loss_mask(spec, 2), [1, 1, 0, 1, 1, 0])
  np.testing.assert_array_equal(gr.loss_mask(spec, 2, False), [0, 1, 0, 0, 1, 0])
  gauss = gr.token_spec(envs.BanditParams(num_arms=3, kind="gaussian", noise=1.0), 6)
  assert gauss.reward_low == pytest.approx(-3 * math.sqrt(2))
  np.testing.assert_array_equal(gr.reward_token(gauss, jnp.array([-100.0, 0.01, 100.0])),
                                gauss.reward0 + np.array([0, 3, 5]))
  with pytest.raises(ValueError, match="num_arms"):
    gr.TokenSpec(num_arms=1)


def test_rollout_bookkeeping_matches_the_history():
  """UCB / greedy labels, untried flags and reward tokens of a rollout, recomputed from
  its actions and rewards; without the rationale the slots hold the blank."""
  params = envs.BanditParams(num_arms=3, max_steps_in_episode=6)
  spec = gr.token_spec(params)
  net = tfm.create(tfm.TransformerConfig(spec.vocab_size, 8, 1, 1, spec.seq_len(6)),
                   jax.random.key(0))
  means = jnp.tile(jnp.array([0.2, 0.5, 0.8]), (8, 1))
  play = jax.jit(lambda flag: gr.rollout(net, jax.random.key(1), means, spec, params,
                                         rationale=flag, c=0.5, horizon=6))
  for flag in (True, False):
    ep = play(flag)
    a, r = np.asarray(ep.actions), np.asarray(ep.rewards)
    counts, sums = gr.prefix_stats(ep.actions, ep.rewards, 3)
    np.testing.assert_array_equal(ep.ucb, gr.ucb_arm(counts, sums, 0.5))
    np.testing.assert_array_equal(ep.greedy, gr.greedy_arm(counts, sums))
    valid = a >= 0
    tried = np.take_along_axis(np.asarray(counts), np.clip(a, 0, 2)[..., None], -1)[..., 0]
    np.testing.assert_array_equal(ep.untried, valid & (tried == 0))
    tok = np.asarray(ep.tokens)
    assert tok.shape == (8, 19) and (tok[:, 0] == spec.BOS).all()
    np.testing.assert_array_equal(tok[:, 3::3], np.asarray(gr.reward_token(spec, ep.rewards)))
    np.testing.assert_array_equal(np.where(valid, tok[:, 2::3] - spec.arm0, -1), a)
    assert (r[~valid] == 0).all() and set(np.unique(r)) <= {0.0, 1.0}
    if flag:
      why = tok[:, 1::3]
      ok = (why >= spec.why0) & (why < spec.why0 + 3)
      np.testing.assert_array_equal(ep.rationales, np.where(ok, why - spec.why0, -1))
    else:
      assert (tok[:, 1::3] == spec.PAD).all() and (np.asarray(ep.rationales) == -1).all()


def test_rlft_rewards_and_advantages():
  ep = gr.Episodes(tokens=None, actions=jnp.array([[0, -1, 1]]), rationales=None,
                   rewards=jnp.array([[1.0, 0.0, 0.5]]), ucb=None, greedy=None,
                   untried=jnp.array([[True, False, True]]), means=None)
  np.testing.assert_allclose(gr.step_rewards(ep, gr.Shaping(5.0, 1.0), 2.0),
                             [[1.5, -5.0, 1.25]])
  np.testing.assert_allclose(gr.step_rewards(ep, gr.Shaping(0.0, 0.0)), [[1.0, 0.0, 0.5]])
  rewards = jnp.array([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
  g = np.array([[2.0, 1.0, 1.0], [0.0, 0.0, 0.0], [3.0, 2.0, 1.0]])
  np.testing.assert_allclose(gr.step_advantages(rewards),
                             (g - g.mean(0)) / (g.std(0) + 1e-6), rtol=1e-5)
  four = jnp.concatenate([rewards[:2], rewards[1:]])  # groups of 2: rows (0, 1), (1, 2)
  g4 = np.concatenate([g[:2], g[1:]]).reshape(2, 2, 3)
  np.testing.assert_allclose(gr.step_advantages(four, group_size=2).reshape(2, 2, 3),
                             (g4 - g4.mean(1, keepdims=True)) / (g4.std(1, keepdims=True) + 1e-6),
                             rtol=1e-5)
  spec = gr.TokenSpec(num_arms=2)
  np.testing.assert_array_equal(gr.token_advantages(spec, jnp.array([[1.0, 2.0]])),
                                [[1, 1, 1, 2, 2, 2]])
  with pytest.raises(ValueError, match="minibatch_size"):
    gr.RLFTConfig(episodes=10, minibatch_size=4)
  with pytest.raises(ValueError, match="group_size"):
    gr.RLFTConfig(episodes=16, minibatch_size=16, group_size=3)
