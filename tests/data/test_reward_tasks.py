"""Reward tasks: the rewards and drift proxies, reward-labelled pairs, sample statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import reward_tasks as rt
from jaxlab.data.digits import load_digits
from jaxlab.data.mixtures import ring_centres


def test_label_pairs_orders_and_flips_nested():
  task = rt.mixture_task()

  @jax.jit
  def rewards():
    x = task.sample_data(jax.random.key(0), 400)
    x_w, x_l = rt.label_pairs(task, x, jax.random.key(1), (0.0, 0.25, 0.5))
    return jax.vmap(task.reward)(x_w), jax.vmap(task.reward)(x_l)

  r_w, r_l = (np.asarray(a) for a in rewards())
  assert r_w.shape == (3, 200)
  assert np.all(r_w[0] >= r_l[0])
  flipped = r_w < r_l
  assert flipped[1].sum() <= 50 and flipped[2].sum() <= 100  # ties are never "flipped"
  assert flipped[1].sum() >= 45 and flipped[2].sum() >= 90
  assert np.all(flipped[2][flipped[1]])  # pairs flipped at 25 % stay flipped at 50 %


def test_tasks_rewards_and_proxies():
  mix = rt.mixture_task()
  centres = 2.0 * jnp.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
  points = jnp.array([[2.05, 0.0], [0.0, 0.0]])
  reward, off = jax.jit(lambda: (mix.reward(centres), mix.off_manifold(points)))()
  np.testing.assert_allclose(reward, [1.0, 0.5, 0.0], atol=0.02)
  assert np.asarray(off).tolist() == [False, True]

  dig = rt.digits_task()
  noise = jax.random.uniform(jax.random.key(0), (50, 64), minval=-1, maxval=1)
  mode, r, off_real, off_noise = (np.asarray(a) for a in jax.jit(lambda x: (
      dig.mode(x), dig.reward(x), dig.off_manifold(x), dig.off_manifold(noise)))(dig.dataset))
  target = load_digits("signed").y
  assert np.mean(mode == target) > 0.85
  assert r[target == 0].mean() < 0.2 < 0.7 < r[target == 9].mean()
  assert not np.any(off_real) and np.mean(off_noise) > 0.9


def _reward_at_centres():
  """At centre j: sum_k w_k exp(-|mu_j - mu_k|^2 / (2 * 0.5^2)), w_k = (1 + cos theta_k) / 2
  (its own weight plus the neighbours' Gaussian tails), in float64."""
  theta = 2 * np.pi * np.arange(8) / 8
  mu = 2.0 * np.stack([np.cos(theta), np.sin(theta)], 1)
  sq = np.sum((mu[:, None] - mu[None]) ** 2, -1)
  return np.exp(-sq / (2 * 0.5**2)) @ ((1 + np.cos(theta)) / 2)


def test_mixture_task_samples_the_ring_and_its_reward_closed_form():
  task = rt.mixture_task()
  x = task.sample_data(jax.random.key(2), 20_000)
  modes = np.asarray(task.mode(x))
  np.testing.assert_allclose(np.bincount(modes, minlength=8) / len(modes), 1 / 8, atol=0.01)
  # every sample within ~4 std of its mode: the off-manifold proxy is ~0 on the data
  # (P(|N(0, I_2)| > 4) = exp(-8) = 3.4e-4)
  assert float(jnp.mean(task.off_manifold(x))) < 2e-3
  np.testing.assert_allclose(task.reward(ring_centres(8, 2.0)), _reward_at_centres(), rtol=1e-5)


def test_sample_stats_histogram_and_kl():
  task = rt.mixture_task()
  centres = ring_centres(8, 2.0)
  x = jnp.concatenate([jnp.repeat(centres[:1], 6, 0), jnp.repeat(centres[4:5], 2, 0)])
  uniform = jnp.full(8, 1 / 8)
  s = rt.sample_stats(task, x, uniform)
  np.testing.assert_allclose(s["hist"], [0.75, 0, 0, 0, 0.25, 0, 0, 0])
  # add-half smoothing: p = (count + 0.5) / (n + 4), q = (n / 8 + 0.5) / (n + 4), n = 8
  p = (np.asarray(s["hist"]) * 8 + 0.5) / 12
  q = np.full(8, 1.5 / 12)
  np.testing.assert_allclose(s["mode_kl"], np.sum(p * np.log(p / q)), rtol=1e-6)
  assert float(rt.sample_stats(task, x, s["hist"])["mode_kl"]) == pytest.approx(0.0, abs=1e-7)
  r = _reward_at_centres()
  np.testing.assert_allclose(s["reward"], (6 * r[0] + 2 * r[4]) / 8, rtol=1e-5)
  assert "mode_kl" not in rt.sample_stats(task, x)
