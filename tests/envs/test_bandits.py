"""K-armed bandits: reward statistics against the arm means, arm-mean draws, invalid actions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import envs
from jaxlab.envs import bandits


@pytest.fixture(scope="module")
def pulls():
  """``n`` steps of one arm from one state, per bandit kind (jitted, vmapped over keys)."""
  env = envs.MultiArmedBandit()

  @jax.jit
  def run(key, state, action, params):
    keys = jax.random.split(key, 4000)
    return jax.vmap(env.step, (0, None, None, None))(keys, state, action, params)

  return env, run


def test_rewards_have_the_arm_means_and_noise(pulls):
  env, run = pulls
  for params in (envs.BanditParams(num_arms=5), envs.BanditParams(num_arms=5, kind="gaussian",
                                                                  noise=0.5)):
    _, state = env.reset(jax.random.key(0), params)
    means = np.asarray(state.means)
    for arm in (0, 3):
      obs, _, reward, term, trunc, info = run(jax.random.key(arm + 1), state, jnp.int32(arm),
                                              params)
      r = np.asarray(reward)
      sd = np.sqrt(means[arm] * (1 - means[arm])) if params.kind == "bernoulli" else 0.5
      assert abs(r.mean() - means[arm]) < 4 * sd / np.sqrt(r.size) + 1e-6
      if params.kind == "bernoulli":
        assert set(np.unique(r)) <= {0.0, 1.0}
      else:
        assert r.std() == pytest.approx(0.5, rel=0.05)
      np.testing.assert_allclose(info["regret"], means.max() - means[arm], rtol=1e-6)
      assert (np.asarray(info["best_arm"]) == means.argmax()).all()
      assert not np.asarray(term).any() and not np.asarray(trunc).any()
      np.testing.assert_allclose(obs[:, :2], np.stack([np.full(r.size, arm), r], 1))


def test_invalid_action_pays_nothing_and_counts_as_the_worst_arm(pulls):
  env, run = pulls
  params = envs.BanditParams(num_arms=5)
  _, state = env.reset(jax.random.key(3), params)
  means = np.asarray(state.means)
  for bad in (-1, 5):
    _, _, reward, _, _, info = run(jax.random.key(0), state, jnp.int32(bad), params)
    assert (np.asarray(reward) == 0).all() and np.asarray(info["invalid_action"]).all()
    np.testing.assert_allclose(info["regret"], means.max() - means.min(), rtol=1e-6)


def test_arm_means_per_episode_and_horizon():
  keys = jax.random.split(jax.random.key(0), 2000)
  draw = jax.jit(jax.vmap(bandits.arm_means, (0, None)))
  b = np.asarray(draw(keys, envs.BanditParams(num_arms=10)))
  assert b.shape == (2000, 10) and b.min() >= 0 and b.max() <= 1
  assert b.mean() == pytest.approx(0.5, abs=0.01) and b.var() == pytest.approx(1 / 12, abs=0.005)
  g = np.asarray(draw(keys, envs.BanditParams(num_arms=20, kind="gaussian", mean_scale=2.0)))
  assert g.mean() == pytest.approx(0.0, abs=0.03) and g.std() == pytest.approx(2.0, rel=0.02)
  env = envs.MultiArmedBandit()
  params = envs.BanditParams()
  assert params.max_steps_in_episode == bandits.HORIZON == 50
  _, state = env.reset(jax.random.key(0), params)
  assert env.is_truncated(state.replace(time=50), params)
  assert not env.is_truncated(state.replace(time=49), params)


def test_bad_parameters_raise():
  with pytest.raises(ValueError, match="num_arms"):
    envs.BanditParams(num_arms=1)
  with pytest.raises(ValueError, match="kind"):
    envs.BanditParams(kind="poisson")
  with pytest.raises(ValueError, match="noise"):
    envs.BanditParams(kind="gaussian", noise=0.0)
  env = envs.MultiArmedBandit()
  params = envs.BanditParams()
  _, state = env.reset(jax.random.key(0), params)
  with pytest.raises(TypeError, match="integer"):
    env.step_env(jax.random.key(0), state, jnp.float32(1.0), params)
  with pytest.raises(ValueError, match="scalar"):
    env.step_env(jax.random.key(0), state, jnp.zeros(2, jnp.int32), params)
