"""Data sets with a known reward and drift proxies, and preference pairs labelled by it.

The test beds of alpha-DPO's label-noise study (``experiments/alpha_dpo.py``): a
generative model is pretrained on a :class:`Task`'s data, pairs of its samples
are labelled by the task's reward (:func:`label_pairs`, with a share of the
labels flipped), and the fine-tuned model's samples are scored by
:func:`sample_stats` (mean reward, fraction off the data manifold, mode
histogram and its KL to the reference's). All of a task's functions are jnp
and jittable.

* :func:`mixture_task`: 8 Gaussians (std 0.12) on a circle of radius 2
  (:mod:`jaxlab.data.mixtures`); reward ``sum_k w_k exp(-|x - mu_k|^2 / (2 *
  0.5^2))`` with ``w_k = (1 + cos theta_k) / 2``; off manifold beyond 4 std of
  every mode; mode = the nearest centre.
* :func:`digits_task`: scikit-learn's digits in ``[-1, 1]`` (the ``"signed"``
  variant of :func:`jaxlab.data.digits.load_digits`); reward ``E[k] / 9`` under a
  nearest-class-mean probe ``softmax_k(-|x - mean_k|^2 / tau)``; off manifold
  beyond the 99th percentile of real nearest-neighbour distances; mode = the
  probe's class.

Example:
  >>> task = mixture_task()
  >>> x = task.sample_data(jax.random.key(0), 400)
  >>> x_w, x_l = label_pairs(task, x, jax.random.key(1), flips=(0.0, 0.2))   # (2, 200, 2)
  >>> sample_stats(task, x)["reward"]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.digits import load_digits
from jaxlab.data.mixtures import ring_angles, ring_centres, sample_mixture


class Task(NamedTuple):
  """A data set with a known reward and drift proxies (all jnp, jittable)."""

  name: str
  dim: int
  num_modes: int
  sample_data: Callable[[jax.Array, int], jax.Array]  # (key, n) -> (n, dim)
  reward: Callable[[jax.Array], jax.Array]  # (n, dim) -> (n,)
  off_manifold: Callable[[jax.Array], jax.Array]  # (n, dim) -> (n,) bool
  mode: Callable[[jax.Array], jax.Array]  # (n, dim) -> (n,) int in [0, num_modes)
  dataset: jax.Array | None = None  # a fixed training set (else pretrain on sample_data)


def mixture_task(num_modes: int = 8, radius: float = 2.0, std: float = 0.12,
                 reward_width: float = 0.5) -> Task:
  """Gaussians on a ring; the reward favours the mode at angle 0 (1) over the opposite (0)."""
  centres = ring_centres(num_modes, radius)
  weights = jnp.asarray((1 + np.cos(ring_angles(num_modes))) / 2, jnp.float32)

  def sq_dist(x):
    return jnp.sum(jnp.square(x[:, None, :] - centres[None]), -1)

  return Task(
      name="mixture", dim=2, num_modes=num_modes,
      sample_data=lambda key, n: sample_mixture(key, centres, std, n),
      reward=lambda x: jnp.sum(weights * jnp.exp(-sq_dist(x) / (2 * reward_width**2)), -1),
      off_manifold=lambda x: jnp.min(sq_dist(x), -1) > (4 * std) ** 2,
      mode=lambda x: jnp.argmin(sq_dist(x), -1))


def digits_task() -> Task:
  """scikit-learn's digits in ``[-1, 1]`` with a graded reward favouring the larger digits."""
  digits = load_digits("signed")
  data, target = digits.x, digits.y
  means = np.stack([data[target == k].mean(0) for k in range(10)])
  within = np.sum((data - means[target]) ** 2, -1).mean()
  # probe: softmax(-|x - mean_k|^2 / tau), tau = within-class mean squared distance / 4
  # (90% accuracy on the real digits, and soft enough to give a graded reward)
  centres, tau = jnp.asarray(means), float(within / 4)
  real = jnp.asarray(data)
  sq = np.sum(data * data, -1)
  d2 = sq[:, None] - 2 * data @ data.T + sq[None]
  np.fill_diagonal(d2, np.inf)
  threshold = float(np.quantile(d2.min(1), 0.99))  # squared NN distance among real digits

  def logits(x):
    return -jnp.sum(jnp.square(x[:, None] - centres[None]), -1) / tau

  def nn_sq_dist(x):
    return jnp.min(jnp.sum(x * x, -1)[:, None] - 2 * x @ real.T
                   + jnp.sum(real * real, -1)[None], -1)

  return Task(
      name="digits", dim=64, num_modes=10,
      sample_data=lambda key, n: real[jax.random.randint(key, (n,), 0, real.shape[0])],
      reward=lambda x: jax.nn.softmax(logits(x), -1) @ jnp.arange(10.0) / 9.0,
      off_manifold=lambda x: nn_sq_dist(x) > threshold,
      mode=lambda x: jnp.argmax(logits(x), -1), dataset=real)


TASKS = {"mixture": mixture_task, "digits": digits_task}


def sample_stats(task: Task, x: jax.Array, ref_hist: jax.Array | None = None) -> dict:
  """Mean reward, off-manifold fraction, mode histogram (and KL to ``ref_hist``)."""
  hist = jnp.bincount(task.mode(x), length=task.num_modes) / x.shape[0]
  out = {"reward": jnp.mean(task.reward(x)), "off_manifold": jnp.mean(task.off_manifold(x)),
         "hist": hist}
  if ref_hist is not None:  # add-half smoothing so empty modes keep the KL finite
    n = x.shape[0]
    p = (hist * n + 0.5) / (n + 0.5 * task.num_modes)
    q = (ref_hist * n + 0.5) / (n + 0.5 * task.num_modes)
    out["mode_kl"] = jnp.sum(p * jnp.log(p / q))
  return out


def label_pairs(task: Task, x: jax.Array, key: jax.Array,
                flips: tuple[float, ...]) -> tuple[jax.Array, jax.Array]:
  """Pairs rows ``i`` and ``N + i`` of ``x``; returns ``(x_w, x_l)`` per flip rate.

  Args:
    task: gives the reward that orders each pair (anything with ``reward(x) -> (n,)``).
    x: ``(2N, D)`` samples.
    key: PRNG key for which pairs are flipped.
    flips: flip rates; the pairs flipped at a lower rate are among those at a higher.

  Returns:
    ``(F, N, D)`` preferred and rejected samples.
  """
  n = x.shape[0] // 2
  a, b = x[:n], x[n:]
  a_wins = (task.reward(a) >= task.reward(b))[:, None]
  x_w, x_l = jnp.where(a_wins, a, b), jnp.where(a_wins, b, a)
  rank = jax.random.permutation(key, n)
  ws, ls = [], []
  for f in flips:
    flip = (rank < round(f * n))[:, None]
    ws.append(jnp.where(flip, x_l, x_w))
    ls.append(jnp.where(flip, x_w, x_l))
  return jnp.stack(ws), jnp.stack(ls)
