"""Reason-annotated preference pairs under a spurious feature (ReCouPLe's synthetic test bed).

Pairs of trajectory segments with a preference label, a *reason* vector (why
the chosen segment is better) and a *task* vector (:class:`PreferenceData`, the
input of :mod:`jaxlab.preference.recouple`), and the
multi-task generator of ``experiments/recouple.py`` (the design is ours; the
paper uses ManiSkill / Meta-World with T5 text embeddings):

* Each step of a segment has ``F = 8`` features: four causal ones ``c_0..c_3``,
  one spurious ``s`` and three nuisances. Causal and nuisance features are a
  per-segment mean (``N(0, 0.5^2)``) plus per-step ``N(0, 1)`` noise.
* Task ``k`` rewards a step by ``r_k = sum_j a_kj c_j`` (:data:`TRAIN_WEIGHTS`:
  two neighbouring causal features each; :data:`NEW_WEIGHTS`: a held-out pair).
* Reasons are fixed orthonormal vectors ``e_j`` in a 16-d space; a task's vector
  is ``w_k = sum_j a_kj e_j + 0.5 t_k`` with a task-identity direction ``t_k``
  orthogonal to every reason (:func:`geometry`).
* Training labels follow Bradley-Terry on the true return, test labels its sign;
  the reason is a softmax sample over the label-signed causal contributions
  (:func:`make_pairs`).
* The spurious feature's per-segment mean is ``+m`` on the chosen segment and
  ``-m`` on the other in the confounded tasks (:data:`REGIMES`), reversed or
  independent in the test splits (:func:`setting_data`).

Everything here is numpy (no compilation); the arrays are float32.

Example:
  >>> geo = geometry()
  >>> data = setting_data(0, 0, geo, "partial", 0.5, dict(segment_len=8, train_pairs=400,
  ...                     test_pairs=400, few_shot_pairs=16))
  >>> data["train"].segments_a.shape                              # (1600, 8, 8)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np


class PreferenceData(NamedTuple):
  """Pairs of segments with labels, reasons and task vectors (plain arrays).

  Attributes:
    segments_a: ``(N, T, F)`` per-step features of the first segments.
    segments_b: ``(N, T, F)`` of the second segments.
    labels: ``(N,)`` probability that ``segments_b`` is preferred.
    reasons: ``(N, D)`` reason vector of each pair (unused by Bradley-Terry).
    tasks: ``(N, D)`` task vector of each pair.
  """

  segments_a: jax.Array
  segments_b: jax.Array
  labels: jax.Array
  reasons: jax.Array
  tasks: jax.Array


N_CAUSAL, SPURIOUS, N_FEATURES = 4, 4, 8
EMBED_DIM = 16
TRAIN_WEIGHTS = np.array([[1.0, 0.5, 0.0, 0.0], [0.0, 1.0, 0.5, 0.0], [0.0, 0.0, 1.0, 0.5],
                          [0.5, 0.0, 0.0, 1.0]], np.float32)
NEW_WEIGHTS = np.array([[1.0, 0.0, 0.5, 0.0]], np.float32)
TASK_IDENTITY = 0.5  # weight of the task-specific direction in a task vector
SEGMENT_MEAN_STD = 0.5  # spread of per-segment feature means
LABEL_TEMPERATURE = 0.25  # Bradley-Terry temperature, in units of the return-difference std
REASON_TEMPERATURE = 0.1  # reason softmax temperature, same units
# Which training tasks carry the spurious shortcut: "partial" (tasks 0 and 2; every
# causal feature, hence every reason, also appears in a clean task) or "all".
REGIMES = {"partial": (1.0, 0.0, 1.0, 0.0), "all": (1.0, 1.0, 1.0, 1.0)}


class Geometry(NamedTuple):
  """Fixed reason and task vectors of the shared embedding space."""

  reasons: np.ndarray  # (N_CAUSAL, EMBED_DIM) orthonormal
  train_tasks: np.ndarray  # (4, EMBED_DIM)
  new_tasks: np.ndarray  # (1, EMBED_DIM)


def geometry() -> Geometry:
  """Reasons ``e_j`` and task vectors ``w_k = sum_j a_kj e_j + 0.5 t_k`` (fixed seed 0)."""
  basis, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((EMBED_DIM, EMBED_DIM)))
  basis = basis.T.astype(np.float32)
  reasons = basis[:N_CAUSAL]
  ident = basis[N_CAUSAL:N_CAUSAL + len(TRAIN_WEIGHTS) + len(NEW_WEIGHTS)]
  tasks = np.concatenate([TRAIN_WEIGHTS, NEW_WEIGHTS]) @ reasons + TASK_IDENTITY * ident
  return Geometry(reasons, tasks[:len(TRAIN_WEIGHTS)], tasks[len(TRAIN_WEIGHTS):])


def make_pairs(rng: np.random.Generator, weights: np.ndarray, task_vectors: np.ndarray,
               reasons: np.ndarray, n_per_task: int, segment_len: int, spurious: np.ndarray,
               shift: float, noisy_labels: bool) -> PreferenceData:
  """Labelled pairs for every task in ``weights`` (numpy: no compilation).

  Args:
    rng: numpy generator; the causal and nuisance features are drawn first, so two
      calls from generators in the same state share their segments whatever
      ``spurious`` is.
    weights: ``(K, N_CAUSAL)`` reward weights ``a_k``.
    task_vectors: ``(K, EMBED_DIM)`` task vectors.
    reasons: ``(N_CAUSAL, EMBED_DIM)`` reason vectors.
    n_per_task: pairs per task.
    segment_len: steps per segment.
    spurious: ``(K,)`` per task: +1 the spurious feature favours the label, -1 it opposes
      it, 0 independent.
    shift: ``m``, the spurious feature's per-segment mean on the chosen segment.
    noisy_labels: Bradley-Terry labels (training) instead of the sign of the return gap (test).

  Returns:
    the pairs (float32 arrays), tasks in blocks of ``n_per_task``; labels are 0/1.
  """
  n_tasks = weights.shape[0]
  n = n_tasks * n_per_task
  task_idx = np.repeat(np.arange(n_tasks), n_per_task)
  a = weights[task_idx]  # (n, N_CAUSAL)
  x = (SEGMENT_MEAN_STD * rng.standard_normal((2, n, 1, N_FEATURES))
       + rng.standard_normal((2, n, segment_len, N_FEATURES)))
  sums = x[..., :N_CAUSAL].sum(2)  # (2, n, N_CAUSAL) per-feature returns
  contrib = a * (sums[1] - sums[0])  # each causal feature's share of R_b - R_a
  gap = contrib.sum(-1)
  scale = np.sqrt(2.0 * segment_len * (1 + SEGMENT_MEAN_STD**2 * segment_len)
                  * np.sum(a * a, -1))  # std of the return gap
  u_label, gumbel = rng.random(n), rng.gumbel(size=(n, N_CAUSAL))
  if noisy_labels:
    labels = u_label < 1 / (1 + np.exp(-gap / (LABEL_TEMPERATURE * scale)))
  else:
    labels = gap > 0
  sign = 2.0 * labels - 1
  logits = np.where(a > 0, sign[:, None] * contrib / (REASON_TEMPERATURE * scale[:, None]),
                    -np.inf)
  reason_idx = np.argmax(logits + gumbel, -1)  # a softmax sample (Gumbel-max)
  # spurious: +m on the chosen segment (b if label 1), -m on the other, times `spurious`
  mean = np.asarray(spurious)[task_idx] * shift * np.stack([-sign, sign])  # (2, n)
  x[..., SPURIOUS] = mean[..., None] + rng.standard_normal((2, n, segment_len))
  f32 = lambda v: np.asarray(v, np.float32)
  return PreferenceData(f32(x[0]), f32(x[1]), f32(labels), f32(reasons[reason_idx]),
                           f32(task_vectors[task_idx]))


def true_return_gap(data: PreferenceData, weights: np.ndarray) -> np.ndarray:
  """``R_b - R_a`` under the true rewards; pairs are in equal blocks per task of ``weights``."""
  a = np.repeat(weights, data.labels.shape[-1] // weights.shape[0], axis=0)
  diff = (np.asarray(data.segments_b) - np.asarray(data.segments_a))[..., :N_CAUSAL].sum(-2)
  return np.sum(a * diff, -1)


def setting_data(seed: int, index: int, geo: Geometry, regime: str, shift: float, cfg: dict
                 ) -> dict[str, PreferenceData]:
  """Training pairs, the test splits and the new task's few-shot pairs of one seed.

  ``id`` / ``ood`` / ``decorrelated`` share their segments (same generator state)
  and differ only in the spurious feature, so the splits are paired.
  """
  seq = np.random.SeedSequence([seed, index])
  s_train, s_test, s_new, s_few = seq.spawn(4)
  mask = np.asarray(REGIMES[regime])
  pairs = lambda s, w, tasks, n, spurious, noisy: make_pairs(
      np.random.default_rng(s), w, tasks, geo.reasons, n, cfg["segment_len"], spurious, shift,
      noisy)
  return {
      "train": pairs(s_train, TRAIN_WEIGHTS, geo.train_tasks, cfg["train_pairs"], mask, True),
      "id": pairs(s_test, TRAIN_WEIGHTS, geo.train_tasks, cfg["test_pairs"], mask, False),
      "ood": pairs(s_test, TRAIN_WEIGHTS, geo.train_tasks, cfg["test_pairs"], -mask, False),
      "decorrelated": pairs(s_test, TRAIN_WEIGHTS, geo.train_tasks, cfg["test_pairs"],
                            0 * mask, False),
      "new": pairs(s_new, NEW_WEIGHTS, geo.new_tasks, cfg["test_pairs"], np.zeros(1), False),
      "few_shot": pairs(s_few, NEW_WEIGHTS, geo.new_tasks, cfg["few_shot_pairs"], np.zeros(1),
                        True),
  }
