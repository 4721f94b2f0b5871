r"""Isotropic Gaussian mixtures: centres on a ring, sampling and the exact log-density.

.. math::
  p(x) = \sum_k \pi_k\, \mathcal N(x;\ \mu_k,\ \sigma^2 I), \qquad
  \mu_k = r\,(\cos\theta_k, \sin\theta_k),\quad \theta_k = 2\pi k / K \text{ (ring)}.

The 2-D test bed of :mod:`jaxlab.data.reward_tasks` (alpha-DPO's mixture task):
8 modes on a circle of radius 2 with std 0.12. Everything is jnp and jittable.

Example:
  >>> centres = ring_centres(8, radius=2.0)                           # (8, 2) float32
  >>> x = sample_mixture(jax.random.key(0), centres, 0.12, 1000)      # (1000, 2)
  >>> logp = mixture_log_density(x, centres, 0.12)                     # (1000,)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


def ring_angles(num_modes: int) -> np.ndarray:
  """``theta_k = 2 pi k / K`` (float64), ``k = 0..K-1``: mode 0 at angle 0."""
  if not isinstance(num_modes, int) or num_modes < 1:
    raise ValueError(f"num_modes must be an int >= 1, got {num_modes!r}")
  return 2 * np.pi * np.arange(num_modes) / num_modes


def ring_centres(num_modes: int, radius: float = 2.0) -> jax.Array:
  """``(K, 2)`` float32 centres ``radius * (cos theta_k, sin theta_k)`` on a circle."""
  angles = ring_angles(num_modes)
  return jnp.asarray(radius * np.stack([np.cos(angles), np.sin(angles)], 1), jnp.float32)


def sample_mixture(key: jax.Array, centres: ArrayLike, std: ArrayLike, n: int,
                   probs: ArrayLike | None = None) -> jax.Array:
  """``n`` draws of the mixture: a component per draw, then ``mu_k + std * N(0, I)``.

  Args:
    key: PRNG key (split into the component key and the noise key).
    centres: ``(K, D)`` component means.
    std: isotropic standard deviation (shared by the components).
    n: number of samples (static).
    probs: ``(K,)`` component weights (default: uniform, drawn with
      ``jax.random.randint``; otherwise ``jax.random.categorical`` on ``log probs``).

  Returns:
    ``(n, D)`` samples.
  """
  centres = jnp.asarray(centres)
  k_c, k_x = jax.random.split(key)
  num_modes, dim = centres.shape
  if probs is None:
    c = jax.random.randint(k_c, (n,), 0, num_modes)
  else:
    c = jax.random.categorical(k_c, jnp.log(jnp.asarray(probs)), shape=(n,))
  return centres[c] + std * jax.random.normal(k_x, (n, dim))


def mixture_log_density(x: ArrayLike, centres: ArrayLike, std: ArrayLike,
                        probs: ArrayLike | None = None) -> jax.Array:
  """``log p(x)`` of the isotropic mixture, ``(..., D) -> (...)`` (logsumexp over modes)."""
  x, centres = jnp.asarray(x), jnp.asarray(centres)
  num_modes, dim = centres.shape
  log_w = (jnp.full(num_modes, -jnp.log(num_modes)) if probs is None
           else jnp.log(jnp.asarray(probs)))
  sq = jnp.sum(jnp.square(x[..., None, :] - centres), -1)
  log_n = -0.5 * sq / std**2 - dim * jnp.log(std) - 0.5 * dim * jnp.log(2 * jnp.pi)
  return jax.nn.logsumexp(log_w + log_n, -1)
