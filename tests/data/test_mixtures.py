"""Gaussian mixtures: ring geometry, sample moments and the density against closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxlab.data import mixtures


def test_ring_centres():
  c = np.asarray(mixtures.ring_centres(8, radius=2.0))
  assert c.shape == (8, 2) and c.dtype == np.float32
  np.testing.assert_allclose(np.linalg.norm(c, axis=1), 2.0, rtol=1e-6)
  np.testing.assert_allclose(c[0], [2.0, 0.0], atol=1e-6)
  np.testing.assert_allclose(c[2], [0.0, 2.0], atol=1e-6)  # counter-clockwise, 45 degrees apart
  with pytest.raises(ValueError, match="num_modes"):
    mixtures.ring_angles(0)


@pytest.mark.parametrize("probs", [None, (0.5, 0.3, 0.2)])
def test_sample_moments_match_the_closed_form(probs):
  # mean = sum_k pi_k mu_k; covariance = std^2 I + sum_k pi_k (mu_k - mean)(mu_k - mean)^T
  centres = jnp.array([[0.0, 0.0], [3.0, 0.0], [0.0, -2.0]])
  std, n = 0.3, 200_000
  x = np.asarray(jax.jit(lambda k: mixtures.sample_mixture(k, centres, std, n, probs))(
      jax.random.key(0)), np.float64)
  pi = np.full(3, 1 / 3) if probs is None else np.asarray(probs)
  mu = pi @ np.asarray(centres)
  d = np.asarray(centres) - mu
  cov = std**2 * np.eye(2) + (pi[:, None] * d).T @ d
  se = np.sqrt(np.diag(cov) / n)  # standard error of each coordinate's mean
  np.testing.assert_allclose(x.mean(0), mu, atol=5 * se.max())
  np.testing.assert_allclose(np.cov(x.T), cov, rtol=0.02, atol=0.01)
  # component frequencies: the nearest centre is the component (centres are >= 10 std apart)
  k = np.argmin(((x[:, None] - np.asarray(centres)) ** 2).sum(-1), 1)
  np.testing.assert_allclose(np.bincount(k, minlength=3) / n, pi, atol=5 * np.sqrt(0.25 / n))


def test_log_density_matches_scipy_and_integrates_to_one():
  centres = mixtures.ring_centres(4, radius=1.5)
  std, probs = 0.4, jnp.array([0.1, 0.2, 0.3, 0.4])
  x = jax.random.normal(jax.random.key(1), (50, 2)) * 2
  ref = np.log(sum(p * stats.multivariate_normal(c, std**2 * np.eye(2)).pdf(np.asarray(x))
                   for p, c in zip(np.asarray(probs), np.asarray(centres), strict=True)))
  np.testing.assert_allclose(mixtures.mixture_log_density(x, centres, std, probs), ref,
                             rtol=1e-5, atol=1e-5)
  g = np.linspace(-4, 4, 401)
  grid = jnp.asarray(np.stack(np.meshgrid(g, g), -1).reshape(-1, 2), jnp.float32)
  density = np.exp(np.asarray(mixtures.mixture_log_density(grid, centres, std)))
  mass = density.sum() * (g[1] - g[0]) ** 2
  assert mass == pytest.approx(1.0, abs=1e-3)
