r"""Test-Time Matching: group metrics for compositional matching and the TTM loop.

A *group* is ``k`` images and ``k`` captions whose correct pairing is the
diagonal; ``similarity[..., i, j]`` scores image ``i`` against caption ``j``
(rows: images, columns: captions, as a dual encoder's ``logits_per_image``).

* :func:`text_score`, :func:`image_score`, :func:`group_score` (Winoground):
  every correct pair must beat its rivals in its row (text), its column
  (image), or both (group). Chance level of the group score for i.i.d.
  continuous similarities: :func:`group_score_chance`.
* :func:`group_match` (Zhu et al.): 1 iff the correct pairing is the unique
  best one-to-one assignment, i.e. the identity permutation has a strictly
  larger total similarity than each of the other ``k! - 1``. Chance ``1/k!``.
* :func:`pseudo_match`: the best assignment of each group and its margin over
  the second best, kept when the margin reaches a threshold; for ``k = 2`` the
  margin is ``|s00 + s11 - s01 - s10|`` and the official code's rule.
* :func:`threshold_schedule` and :func:`test_time_matching`: rounds of
  (match with the current model, keep confident groups, fine-tune on their
  pseudo-pairs), the threshold decaying from 1 to 0 on a cosine.

References:
  Zhu, Zhang, Tang, "Test-Time Matching: Unlocking Compositional Reasoning in
  Multimodal Models", arXiv 2510.07632, 2025 (ICLR 2026); official code
  github.com/yinglunz/test-time-matching (the 2 x 2 margin rule, the cosine
  threshold schedule, rounds that continue from the fine-tuned model).
  Thrush et al., "Winoground", CVPR 2022 (text / image / group scores).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

ENUMERATE_UP_TO = 6  # k! <= 720 permutations: enumerate in jnp; above, Hungarian assignments
_FORBIDDEN = 1e300  # float64 cost of an edge no assignment may use


def _check(similarity) -> jax.Array:
  s = jnp.asarray(similarity)
  if s.ndim < 2 or s.shape[-1] != s.shape[-2]:
    raise ValueError(f"similarity must have shape (..., k, k), got {s.shape}")
  if s.shape[-1] < 2:
    raise ValueError(f"groups need k >= 2, got k = {s.shape[-1]}")
  if not jnp.issubdtype(s.dtype, jnp.floating):
    raise TypeError(f"similarity must be floating point, got {s.dtype}")
  return s


def _off_diagonal_max(s: jax.Array, axis: int) -> jax.Array:
  k = s.shape[-1]
  masked = jnp.where(jnp.eye(k, dtype=bool), -jnp.inf, s)
  return jnp.max(masked, axis=axis)


def text_score(similarity) -> jax.Array:
  """Every image ranks its own caption first: ``s[i, i] > s[i, j]`` for all ``j != i``."""
  s = _check(similarity)
  return jnp.all(jnp.diagonal(s, axis1=-2, axis2=-1) > _off_diagonal_max(s, -1), axis=-1)


def image_score(similarity) -> jax.Array:
  """Every caption ranks its own image first: ``s[j, j] > s[i, j]`` for all ``i != j``."""
  s = _check(similarity)
  return jnp.all(jnp.diagonal(s, axis1=-2, axis2=-1) > _off_diagonal_max(s, -2), axis=-1)


def group_score(similarity) -> jax.Array:
  """Winoground's group score: both :func:`text_score` and :func:`image_score`."""
  return text_score(similarity) & image_score(similarity)


def group_score_chance(k: int) -> float:
  """Chance of :func:`group_score` for i.i.d. continuous similarities: ``(k-1)! / (2k-1)!``.

  Each diagonal entry must outrank the ``2(k - 1)`` other entries of its row
  and column: 1/6 for ``k = 2``, 1/60 for ``k = 3``. The tests check the
  formula against an exact count over rankings of the ``k^2`` entries and
  against simulation.
  """
  if not (isinstance(k, int) and k >= 2):
    raise ValueError(f"k must be an int >= 2, got {k!r}")
  return math.factorial(k - 1) / math.factorial(2 * k - 1)


def group_match_chance(k: int) -> float:
  """Chance of :func:`group_match` for i.i.d. continuous similarities: ``1 / k!``."""
  if not (isinstance(k, int) and k >= 2):
    raise ValueError(f"k must be an int >= 2, got {k!r}")
  return 1.0 / math.factorial(k)


def _permutations(k: int) -> np.ndarray:
  """All ``k!`` permutations, identity first, as an int array ``(k!, k)``."""
  return np.asarray(list(itertools.permutations(range(k))), np.int32)


def _totals(s: jax.Array) -> tuple[jax.Array, np.ndarray]:
  """Total similarity of every permutation: ``(..., k!)``, and the permutations."""
  perms = _permutations(s.shape[-1])
  rows = np.arange(s.shape[-1])
  return jnp.sum(s[..., rows, perms], axis=-1), perms


def group_match(similarity) -> jax.Array:
  """1 iff the identity is the unique maximum-similarity assignment of the group.

  ``k <= 6``: all ``k!`` totals in ``jnp`` (jit- and vmap-able). Larger ``k``:
  for each group and each diagonal entry, the maximum-similarity assignment with that entry
  forbidden (``optax.assignment.hungarian_algorithm`` on the cost ``-similarity``, vmapped
  over all ``G k`` problems, in float64); the best non-identity assignment is one of them,
  so the identity is the unique maximum iff it beats all ``k`` (concrete arrays only).
  """
  s = _check(similarity)
  k = s.shape[-1]
  if k <= ENUMERATE_UP_TO:
    totals, _ = _totals(s)
    return totals[..., 0] > jnp.max(totals[..., 1:], axis=-1)
  flat = np.asarray(s, np.float64).reshape(-1, k, k)
  # costs[g, i]: -flat[g] with edge (i, i) forbidden; maximizing similarity minimizes -s
  costs = np.repeat(-flat[:, None], k, axis=1)
  diag = np.arange(k)
  costs[:, diag, diag, diag] = np.inf
  costs[~np.isfinite(costs)] = _FORBIDDEN
  with jax.enable_x64(True):  # float64 costs and potentials (float32 without x64)
    rows, cols = jax.vmap(optax.assignment.hungarian_algorithm)(
        jnp.asarray(costs.reshape(-1, k, k)))
  perms = np.empty((len(flat) * k, k), np.int64)  # perms[., r]: the column of row r
  np.put_along_axis(perms, np.asarray(rows), np.asarray(cols), axis=-1)
  perms = perms.reshape(len(flat), k, k)
  groups = np.arange(len(flat))[:, None, None]
  totals = flat[groups, np.arange(k), perms].sum(axis=-1)  # (G, k), summed in row order
  best_other = totals.max(axis=-1)
  out = np.trace(flat, axis1=-2, axis2=-1) > best_other
  return jnp.asarray(out.reshape(s.shape[:-2]))


class PseudoMatch(NamedTuple):
  """The pseudo-labelled pairing of each group (see :func:`pseudo_match`)."""
  permutation: jax.Array  # (..., k) int32: caption index assigned to image i
  margin: jax.Array       # (...,) best total minus second-best total
  selected: jax.Array     # (...,) bool: margin >= threshold


def pseudo_match(similarity, threshold) -> PseudoMatch:
  """Best assignment per group, its margin over the runner-up, and whether it is kept.

  For ``k = 2`` this is the official rule: with ``m = s00 + s11 - s01 - s10``,
  keep the identity if ``m >= threshold`` and the swap if ``m <= -threshold``
  (the margin is ``|m|``). Requires ``k <= 6`` (enumeration; jit-able).
  """
  s = _check(similarity)
  k = s.shape[-1]
  if k > ENUMERATE_UP_TO:
    raise ValueError(f"pseudo_match enumerates k! assignments; k must be <= "
                     f"{ENUMERATE_UP_TO}, got {k}")
  totals, perms = _totals(s)
  top2, idx = jax.lax.top_k(totals, 2)
  margin = top2[..., 0] - top2[..., 1]
  return PseudoMatch(jnp.asarray(perms)[idx[..., 0]], margin, margin >= threshold)


def threshold_schedule(iteration: int, iterations: int, start: float = 1.0, end: float = 0.0,
                       kind: str = "cosine") -> float:
  """The margin threshold of round ``iteration`` (0-based) of ``iterations``.

  ``cosine``: ``end + (start - end) (1 + cos(pi i / (iterations - 1))) / 2``,
  so round 0 uses ``start`` and the last round ``end``; also ``linear`` and
  ``constant``.
  """
  if kind not in ("cosine", "linear", "constant"):
    raise ValueError(f"kind must be 'cosine', 'linear' or 'constant', got {kind!r}")
  if not (isinstance(iterations, int) and iterations >= 1 and 0 <= iteration < iterations):
    raise ValueError(f"need 0 <= iteration < iterations, got {iteration} of {iterations}")
  if kind == "constant" or iterations == 1:
    return float(start)
  frac = iteration / (iterations - 1)
  if kind == "linear":
    return float(start + (end - start) * frac)
  return float(end + 0.5 * (start - end) * (1 + math.cos(math.pi * frac)))


def test_time_matching(params: Any, groups: Any, *,
                       similarity_fn: Callable[[Any, Any], jax.Array],
                       finetune_fn: Callable[[Any, Any, PseudoMatch, int], Any],
                       iterations: int = 10, threshold_start: float = 1.0,
                       threshold_end: float = 0.0, schedule: str = "cosine",
                       callback: Callable[[int, Any], dict] | None = None
                       ) -> tuple[Any, list[dict]]:
  """The TTM loop: match, keep confident groups, fine-tune, repeat.

  Round ``r`` scores every test group with the current ``params``
  (``similarity_fn(params, groups) -> (G, k, k)``), pseudo-labels each with
  its best assignment (:func:`pseudo_match`) at the threshold of
  :func:`threshold_schedule`, and calls ``finetune_fn(params, groups,
  match, r)`` to fine-tune on the kept groups (whatever optimizer and loss the
  model uses: the official code restarts AdamW each round at
  ``lr * 0.95^r`` with a cosine schedule). Rounds continue from the
  fine-tuned parameters; no label is ever read.

  Returns:
    ``(params, history)``: per round the threshold, the number kept, the
    accuracy of the kept pseudo-labels (the identity is correct; for
    monitoring only), and whatever ``callback(round, params)`` returns.
  """
  history = []
  for r in range(iterations):
    th = threshold_schedule(r, iterations, threshold_start, threshold_end, schedule)
    match = pseudo_match(similarity_fn(params, groups), th)
    sel = np.asarray(match.selected)
    correct = np.all(np.asarray(match.permutation) == np.arange(match.permutation.shape[-1]),
                     axis=-1)
    row = {"round": r, "threshold": th, "selected": int(sel.sum()),
           "pseudo_label_accuracy": float(correct[sel].mean()) if sel.any() else None}
    if sel.any():
      params = finetune_fn(params, groups, match, r)
    if callback is not None:
      row.update(callback(r, params))
    history.append(row)
  return params, history


__all__ = ["PseudoMatch", "group_match", "group_match_chance", "group_score",
           "group_score_chance", "image_score", "pseudo_match", "test_time_matching",
           "text_score", "threshold_schedule"]
