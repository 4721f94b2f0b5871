"""FastFlow: UCB1 on a scripted sequence, forced evaluations, NFE, extrapolation references."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.generative import fastflow as ff
from jaxlab.nn import flows

A = jnp.array([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5]])   # (B=2, D=3)
Bt = jnp.array([[1.0, 2.0, -3.0], [0.0, -1.0, 4.0]])


def linear_in_t(obs, x, t):
  """x-independent velocity a + b t: its Euler integral is exact to reason about by hand."""
  del obs
  return A + Bt * t + 0.0 * x


def test_ucb1_scripted_sequence():
  bandit = ff.init_bandit(1)
  chosen = []
  for reward in (1.0, 0.5, 0.0, 0.2, 0.0):
    arm = int(ff.ucb_select(bandit, 0))
    chosen.append(arm)
    bandit = ff.ucb_update(bandit, 0, arm, reward)
  # each arm once, in order; then all n_a = 1, n = 4: argmax q + 2 sqrt(ln 4) -> arm 0 (q = 1)
  assert chosen == [0, 1, 2, 3, 0]
  np.testing.assert_array_equal(bandit.counts[0], [2, 1, 1, 1])
  np.testing.assert_allclose(bandit.values[0], [0.5, 0.5, 0.0, 0.2])   # (1 + 0) / 2
  # n = 5: 0.5 + 2 sqrt(ln5 / 2) = 2.2942, 0.5 + 2 sqrt(ln5) = 3.0372, 2.5372, 2.7372
  want = [0.5 + 2 * math.sqrt(math.log(5) / 2), 0.5 + 2 * math.sqrt(math.log(5)),
          2 * math.sqrt(math.log(5)), 0.2 + 2 * math.sqrt(math.log(5))]
  np.testing.assert_allclose(ff.ucb_scores(bandit, 0), want, rtol=1e-6)
  np.testing.assert_allclose(want, [2.2942, 3.0372, 2.5372, 2.7372], atol=1e-4)
  assert int(ff.ucb_select(bandit, 0)) == 1
  assert int(jax.jit(ff.ucb_select)(bandit, 0)) == 1
  # c = 0 is greedy; ties go to the lowest index
  assert int(ff.ucb_select(bandit, 0, c=0.0)) == 0


def _rigged(num_steps, arm, value=10.0):
  """Bandits whose every arm was tried once and whose ``arm`` wins by far (with c = 0)."""
  counts = jnp.ones((num_steps, len(ff.ARMS)), jnp.int32)
  values = jnp.zeros((num_steps, len(ff.ARMS))).at[:, arm].set(value)
  return ff.BanditState(counts, values)


def _run(num_steps, bandit, gamma, field=linear_in_t, **kw):
  obs, noise = jnp.zeros((2, 0)), jnp.zeros((2, 3))
  fn = jax.jit(lambda n, b: ff.fastflow_sample(field, obs, n, b, num_steps=num_steps,
                                               gamma=gamma, c=0.0, **kw))
  return fn(noise, bandit)


def test_forced_evaluations_and_nfe():
  # arm 2 = skip 4 at every decision, N = 12: eval 0, 1 (forced), 2 (decision), skip 3-6,
  # 7 (reward step, no decision), 8 (decision), skip 9-10, 11 (last: forced, reward)
  calls = []

  def counted(obs, x, t):
    jax.debug.callback(lambda: calls.append(1))
    return linear_in_t(obs, x, t)

  _, info = _run(12, _rigged(12, 2), 0.005, field=counted)
  jax.effects_barrier()
  evaluated = np.flatnonzero(np.asarray(info.evaluated))
  np.testing.assert_array_equal(evaluated, [0, 1, 2, 7, 8, 11])
  assert int(info.nfe) == 6 == len(calls)   # skipped steps ran no network evaluation
  np.testing.assert_array_equal(np.flatnonzero(np.asarray(info.decisions) >= 0), [2, 8])
  # arm 0 everywhere: every step evaluated, a decision at 2..N-2
  _, info = _run(8, _rigged(8, 0), 0.005)
  assert int(info.nfe) == 8 and bool(np.all(info.evaluated))
  np.testing.assert_array_equal(np.asarray(info.decisions), [-1, -1, 0, 0, 0, 0, 0, -1])


def test_rewards_by_hand():
  n, gamma, lam_d, lam_r = 12, 0.25, 0.005, 0.001
  bandit = _rigged(n, 2)
  _, info = _run(n, bandit, gamma, decision_lambda=lam_d, reward_lambda=lam_r)
  b2 = float(np.mean(np.asarray(Bt) ** 2))
  # decision at step 2: lam_d * 4 - MSE(v_2, v_1) = 0.02 - mean(b^2) / N^2
  r_dec = lam_d * 4 - b2 / n**2
  # reward at step 7: v_7 - (v_2 + gamma (v_2 - v_1)) = b (5 - gamma) / N
  r_rew = lam_r * 4 - b2 * (5 - gamma) ** 2 / n**2
  np.testing.assert_allclose(info.bandit.values[2, 2], (10 + r_dec + r_rew) / 3, rtol=1e-5)
  assert int(info.bandit.counts[2, 2]) == 3
  # decision at 8, cut by the forced last step 11: v_11 - extrapolation = b (3 - gamma) / N
  r_dec8 = lam_d * 4 - b2 / n**2
  r_cut = lam_r * 4 - b2 * (3 - gamma) ** 2 / n**2
  np.testing.assert_allclose(info.bandit.values[8, 2], (10 + r_dec8 + r_cut) / 3, rtol=1e-5)
  # untouched bandits
  np.testing.assert_array_equal(np.asarray(info.bandit.counts)[[0, 1, 3, 7, 11]],
                                np.asarray(bandit.counts)[[0, 1, 3, 7, 11]])


def _hand_sampler(field, noise, num_steps, gamma, skipped):
  """Plain loop: evaluate unless the step is in ``skipped``, else extrapolate the history."""
  x, hist = noise, []
  for i in range(num_steps):
    t = jnp.full((noise.shape[0], 1), i / num_steps)
    if i in skipped:   # (gamma = 0 only at step 1: no v_{-1} is needed)
      v = hist[-1] + gamma * (hist[-1] - (hist[-2] if i > 1 else hist[-1]))
    else:
      v = field(None, x, t)
    hist.append(v)
    x = x + v / num_steps
  return x


def test_gamma_zero_is_velocity_caching_and_extrapolation_matches_a_loop():
  def field(obs, x, t):
    del obs
    return jnp.sin(3 * x + 2 * t) - 0.5 * x

  noise = jax.random.normal(jax.random.key(0), (4, 3))
  obs = jnp.zeros((4, 0))
  skipped = {3, 4, 5, 6, 9, 10}
  for gamma in (0.0, 0.005, 1.0):
    got, _ = ff.fastflow_sample(field, obs, noise, _rigged(12, 2), num_steps=12, gamma=gamma,
                                c=0.0)
    np.testing.assert_allclose(got, _hand_sampler(field, noise, 12, gamma, skipped),
                               rtol=1e-5, atol=1e-6)
  # gamma = 0, skip 2 at every decision (N = 10: eval 0-2, skip 3-4, reward 5, decide 6,
  # skip 7-8, last 9): the hand loop reusing the last evaluated v
  got, info = ff.fastflow_sample(field, obs, noise, _rigged(10, 1), num_steps=10, gamma=0.0,
                                 c=0.0)
  np.testing.assert_array_equal(np.flatnonzero(~np.asarray(info.evaluated)), [3, 4, 7, 8])
  x, v = noise, None
  for i in range(10):
    if i not in (3, 4, 7, 8):
      v = field(None, x, jnp.full((4, 1), i / 10))
    x = x + v / 10
  np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-6)


def test_linear_field_exact_with_gamma_one():
  # for v = a + b t the extrapolation with gamma = 1 is exact: the same samples as full Euler
  got, info = _run(12, _rigged(12, 3), 1.0)
  full = flows.euler_sample(linear_in_t, jnp.zeros((2, 0)), jnp.zeros((2, 3)), 12)
  assert int(info.nfe) < 12
  np.testing.assert_allclose(got, full, rtol=1e-5, atol=1e-5)


def test_caching_baseline_and_learning_bandit():
  noise = jax.random.normal(jax.random.key(1), (2, 3))
  x, nfe = ff.caching_sample(linear_in_t, jnp.zeros((2, 0)), noise, num_steps=9)
  assert int(nfe) == 5
  np.testing.assert_allclose(
      x, _hand_sampler(linear_in_t, noise, 9, 0.0, {1, 3, 5, 7}), rtol=1e-6, atol=1e-6)
  # fresh bandits: arms tried in order at each step index over successive calls
  bandit = ff.init_bandit(10)
  sample = jax.jit(lambda b: ff.fastflow_sample(linear_in_t, jnp.zeros((2, 0)), noise, b,
                                                num_steps=10))
  _, info = sample(bandit)
  assert int(info.decisions[2]) == 0     # first call: arm 0 at step 2, ...
  _, info = sample(info.bandit)
  assert int(info.decisions[2]) == 1     # ... then the untried arm 1
  assert int(jnp.sum(info.bandit.counts[2])) >= 2


def test_bad_input():
  noise, obs = jnp.zeros((2, 3)), jnp.zeros((2, 0))
  with pytest.raises(ValueError, match="bandit must have shape"):
    ff.fastflow_sample(linear_in_t, obs, noise, ff.init_bandit(5), num_steps=6)
  with pytest.raises(ValueError, match="num_steps"):
    ff.fastflow_sample(linear_in_t, obs, noise, ff.init_bandit(2), num_steps=2)
  with pytest.raises(ValueError, match="arms must be"):
    ff.fastflow_sample(linear_in_t, obs, noise, ff.init_bandit(6, 2), num_steps=6, arms=(0, -2))
  with pytest.raises(ValueError, match="decision_lambda"):
    ff.fastflow_sample(linear_in_t, obs, noise, ff.init_bandit(6), num_steps=6,
                       decision_lambda=-1.0)
  with pytest.raises(TypeError, match="bandit must be a BanditState"):
    ff.fastflow_sample(linear_in_t, obs, noise, (1, 2), num_steps=6)
