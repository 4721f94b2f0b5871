r"""CARE: entity rewards with an exact matching, mask confidence, and evidence views with a vote.

CARE (Du et al., ICLR 2026) answers medical VQA questions in stages: a small VLM proposes the
entities a question is about, a referring-segmentation expert turns each into a pixel mask
(the region-of-interest evidence), and a grounded VLM answers from the full image plus
evidence built from the mask (a crop, the mask as a hint, the global view); the VLMs are
trained by reinforcement learning with verifiable rewards. This module implements the
pieces that are the paper's mechanism, as pure jittable functions over fixed-shape arrays:

* the **entity reward** of a proposed entity set against the reference set,

  .. math::
    R = R_\mathrm{sim} + R_\mathrm{count} + R_\mathrm{rep} + R_\mathrm{format},

  with :math:`R_\mathrm{sim} = \frac{1}{\max(n_p, n_r)} \sum_{(i, j) \in \pi^\star}
  \cos(e^p_i, e^r_j)` over the maximum-similarity one-to-one matching :math:`\pi^\star`
  of the valid predicted and reference embeddings (Hungarian / Kuhn-Munkres, through
  ``optax.assignment.hungarian_algorithm``: exact, jittable and vmappable over a batch of
  padded sets), :math:`R_\mathrm{count} = [\,c_{lo} \le n_p \le c_{hi}\,]` (1 to 5
  entities), :math:`R_\mathrm{rep} = 1 / (r + 1)` for :math:`r` repeated predictions and
  :math:`R_\mathrm{format} \in \{0, 1\}` (the caller's parse check);
  :func:`greedy_match` (largest similarity first) and :func:`binary_set_reward` (exact
  multiset match) are the baselines;
* the **mask confidence** :math:`C(M) = 1 - \overline{H(M)} / \log 2`, one minus the mean
  per-pixel binary entropy in nats over :math:`\log 2` (1 for a binary mask, 0 for an all-0.5
  one), and the filter :math:`C \ge \tau` (:data:`TAU` = 0.7) that drops uncertain masks;
* **evidence views** of an image from a soft mask: a crop at the window of largest mask mass
  and a masked crop at the mask's centroid (:func:`evidence_views`; the global view is the
  image itself), and :func:`majority_vote` over the views' answers, ties going to the
  earliest valid view.

What is the paper's and what is ours: the reward's four terms, the Hungarian matching of
entity embeddings, the 1-5 count range, :math:`1/(r+1)`, the entropy confidence and
:math:`\tau = 0.7`, the three evidence views and the vote are the paper's [P]. The
normalisation of :math:`R_\mathrm{sim}` by :math:`\max(n_p, n_r)` (so that missing and
extra entities both cost), "repeat" as a later valid prediction whose cosine to an earlier
one is at least ``repeat_threshold``, the view geometry (square windows located from the
mask) and the tie rule are ours [I]. The entities here are digit classes embedded by a
digits classifier, not medical terms embedded by a text encoder; see
``experiments/care.py`` for the stand-in test bed.

Example:
  >>> pred = jnp.eye(4)[jnp.array([2, 0, 1])]            # 3 predicted entity embeddings
  >>> ref = jnp.eye(4)[jnp.array([0, 1, 2])]
  >>> r = entity_reward(pred, jnp.ones(3, bool), ref, jnp.ones(3, bool))
  >>> float(r.total)                                      # 1 + 1 + 1 + 1
  4.0
  >>> float(mask_confidence(jnp.full((8, 8), 0.5)))      # an undecided mask
  0.0

References:
  Du, Wang, Liu, Dvornek, Lu, "Towards Clinical Accountability in Multi-Modal Medical
  Reasoning with an Evidence-Grounded Agentic Framework" (CARE), ICLR 2026,
  arXiv:2603.01607.
  Kuhn, "The Hungarian method for the assignment problem", Naval Research Logistics
  Quarterly, 1955.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.checks import check_int, check_range, is_traced

__all__ = ["TAU", "EntityReward", "Matching", "binary_set_reward", "confidence_filter",
           "cosine_similarity", "count_reward", "entity_reward", "evidence_views",
           "greedy_match", "hungarian_match", "majority_vote", "mask_centroid",
           "mask_confidence", "mask_window", "matched_similarity", "repeat_count",
           "similarity_reward"]

TAU = 0.7  # the paper's confidence threshold
MATCHINGS = ("hungarian", "greedy")


class Matching(NamedTuple):
  """A one-to-one matching of ``K = min(P, R)`` slots between predictions and references.

  Attributes:
    pred: ``(..., K)`` int32 prediction index of each matched pair.
    ref: ``(..., K)`` int32 reference index of each matched pair.
    valid: ``(..., K)`` bool, the pair joins a valid prediction and a valid reference
      (pairs that touch padding are not matches).
  """

  pred: jax.Array
  ref: jax.Array
  valid: jax.Array


class EntityReward(NamedTuple):
  """The entity reward and its terms (each ``(...,)`` float32)."""

  total: jax.Array
  sim: jax.Array
  count: jax.Array
  rep: jax.Array
  format: jax.Array


# ----------------------------------------------------------------------------- checks


def _check_set(emb: Any, valid: Any, name: str) -> tuple[jax.Array, jax.Array]:
  e, v = jnp.asarray(emb), jnp.asarray(valid)
  if e.ndim < 2:
    raise ValueError(f"{name}_emb must be (..., N, D) embeddings, got shape {e.shape}")
  if v.shape != e.shape[:-1]:
    raise ValueError(f"{name}_valid must have shape {e.shape[:-1]} (one flag per entity), "
                     f"got {v.shape}")
  if v.dtype != jnp.bool_:
    raise TypeError(f"{name}_valid must be bool, got {v.dtype}")
  if not jnp.issubdtype(e.dtype, jnp.floating):
    raise TypeError(f"{name}_emb must be floating point, got {e.dtype}")
  return e, v


def _check_pair(pred_emb, pred_valid, ref_emb, ref_valid):
  pe, pv = _check_set(pred_emb, pred_valid, "pred")
  re, rv = _check_set(ref_emb, ref_valid, "ref")
  if pe.shape[-1] != re.shape[-1]:
    raise ValueError(f"pred_emb and ref_emb must share the embedding size, got "
                     f"{pe.shape[-1]} and {re.shape[-1]}")
  if pe.shape[:-2] != re.shape[:-2]:
    raise ValueError(f"pred_emb and ref_emb must share the batch shape, got {pe.shape[:-2]} "
                     f"and {re.shape[:-2]}")
  return pe, pv, re, rv


def _check_matching(matching: str) -> str:
  if matching not in MATCHINGS:
    raise ValueError(f"matching must be one of {MATCHINGS}, got {matching!r}")
  return matching


def _check_sim(sim, pred_valid, ref_valid):
  s = jnp.asarray(sim)
  pv, rv = jnp.asarray(pred_valid), jnp.asarray(ref_valid)
  if s.ndim < 2:
    raise ValueError(f"sim must be (..., P, R), got shape {s.shape}")
  if pv.shape != s.shape[:-1] or rv.shape != s.shape[:-2] + s.shape[-1:]:
    raise ValueError(f"pred_valid and ref_valid must have shapes {s.shape[:-1]} and "
                     f"{s.shape[:-2] + s.shape[-1:]}, got {pv.shape} and {rv.shape}")
  if pv.dtype != jnp.bool_ or rv.dtype != jnp.bool_:
    raise TypeError(f"pred_valid and ref_valid must be bool, got {pv.dtype} and {rv.dtype}")
  return s, pv, rv


# ----------------------------------------------------------------------------- matching


def cosine_similarity(a: jax.Array, b: jax.Array, eps: float = 1e-8) -> jax.Array:
  """``(..., P, R)`` cosines between the rows of ``a (..., P, D)`` and ``b (..., R, D)``."""
  a = a / jnp.maximum(jnp.linalg.norm(a, axis=-1, keepdims=True), eps)
  b = b / jnp.maximum(jnp.linalg.norm(b, axis=-1, keepdims=True), eps)
  return jnp.einsum("...pd,...rd->...pr", a, b)


def _valid_pairs(pred_valid, ref_valid):
  return pred_valid[..., :, None] & ref_valid[..., None, :]


def _hungarian_one(sim, pred_valid, ref_valid) -> Matching:
  p, r = sim.shape
  pairs = _valid_pairs(pred_valid, ref_valid)
  # a bonus larger than any spread of summed cosines (each in [-1, 1]) makes the optimum
  # match as many valid pairs as possible first, then maximise their similarity; pairs that
  # touch padding cost 0 and are dropped from the result
  bonus = 2.0 * min(p, r) + 1.0
  cost = -jnp.where(pairs, sim + bonus, 0.0)
  rows, cols = optax.assignment.hungarian_algorithm(cost)
  rows, cols = rows.astype(jnp.int32), cols.astype(jnp.int32)
  return Matching(rows, cols, pairs[rows, cols])


def hungarian_match(sim: jax.Array, pred_valid: jax.Array, ref_valid: jax.Array) -> Matching:
  r"""The maximum-similarity matching of valid predictions to valid references.

  Among the matchings of the most valid pairs (:math:`\min(n_p, n_r)`), the one of largest
  summed similarity, found exactly by ``optax.assignment.hungarian_algorithm`` on
  the cost ``-(sim + bonus)`` for valid pairs and ``0`` for pairs that touch padding.

  Args:
    sim: ``(..., P, R)`` similarities (e.g. :func:`cosine_similarity`), in ``[-1, 1]``.
    pred_valid: ``(..., P)`` bool, which predictions are real (the rest is padding).
    ref_valid: ``(..., R)`` bool, which references are real.

  Returns:
    A :class:`Matching` of ``min(P, R)`` slots (leading batch axes kept: vmapped).
  """
  s, pv, rv = _check_sim(sim, pred_valid, ref_valid)
  fn = _hungarian_one
  for _ in range(s.ndim - 2):
    fn = jax.vmap(fn)
  return fn(s, pv, rv)


def _greedy_one(sim, pred_valid, ref_valid) -> Matching:
  p, r = sim.shape
  k = min(p, r)
  pairs = _valid_pairs(pred_valid, ref_valid)

  def body(i, carry):
    free, out_p, out_r, out_v = carry
    masked = jnp.where(free, sim, -jnp.inf)
    flat = jnp.argmax(masked)  # the largest similarity still free (first index on ties)
    a, b = (flat // r).astype(jnp.int32), (flat % r).astype(jnp.int32)
    ok = jnp.isfinite(masked.reshape(-1)[flat])
    free = free & ~(jnp.arange(p)[:, None] == a) & ~(jnp.arange(r)[None, :] == b)
    return (free, out_p.at[i].set(a), out_r.at[i].set(b), out_v.at[i].set(ok))

  init = (pairs, jnp.zeros(k, jnp.int32), jnp.zeros(k, jnp.int32), jnp.zeros(k, bool))
  _, out_p, out_r, out_v = jax.lax.fori_loop(0, k, body, init)
  return Matching(out_p, out_r, out_v)


def greedy_match(sim: jax.Array, pred_valid: jax.Array, ref_valid: jax.Array) -> Matching:
  """The greedy matching: repeatedly the most similar free valid pair (the baseline).

  Args and returns as :func:`hungarian_match`; it matches as many pairs, but its summed
  similarity can be lower (a large first pick can block two better ones).
  """
  s, pv, rv = _check_sim(sim, pred_valid, ref_valid)
  fn = _greedy_one
  for _ in range(s.ndim - 2):
    fn = jax.vmap(fn)
  return fn(s, pv, rv)


def matched_similarity(sim: jax.Array, matching: Matching) -> jax.Array:
  """``(...,)`` summed similarity of the valid pairs of ``matching``."""
  vals = _gather_pairs(sim, matching)
  return jnp.sum(jnp.where(matching.valid, vals, 0.0), -1)


def _gather_pairs(sim, matching):
  rows = jnp.take_along_axis(sim, matching.pred[..., :, None], -2)  # (..., K, R)
  return jnp.take_along_axis(rows, matching.ref[..., :, None], -1)[..., 0]


# ----------------------------------------------------------------------------- rewards


def similarity_reward(pred_emb: jax.Array, pred_valid: jax.Array, ref_emb: jax.Array,
                      ref_valid: jax.Array, *, matching: str = "hungarian") -> jax.Array:
  r""":math:`R_\mathrm{sim}`: summed matched cosine over :math:`\max(n_p, n_r)` (0 if both
  sets are empty).

  Args:
    pred_emb: ``(..., P, D)`` predicted entity embeddings.
    pred_valid: ``(..., P)`` bool.
    ref_emb: ``(..., R, D)`` reference entity embeddings.
    ref_valid: ``(..., R)`` bool.
    matching: ``"hungarian"`` (exact, the paper's) or ``"greedy"`` (baseline).

  Returns:
    ``(...,)`` float32; permuting either set leaves it unchanged (with ``"hungarian"``).
  """
  pe, pv, re, rv = _check_pair(pred_emb, pred_valid, ref_emb, ref_valid)
  _check_matching(matching)
  sim = cosine_similarity(pe, re)
  m = (hungarian_match if matching == "hungarian" else greedy_match)(sim, pv, rv)
  total = matched_similarity(sim, m)
  denom = jnp.maximum(jnp.maximum(pv.sum(-1), rv.sum(-1)), 1)
  return (total / denom).astype(jnp.float32)


def count_reward(pred_valid: jax.Array, lo: int = 1, hi: int = 5) -> jax.Array:
  r""":math:`R_\mathrm{count} = [\,lo \le n_p \le hi\,]` (the paper rewards 1 to 5 entities)."""
  lo = check_int(lo, "lo", lo=0)
  hi = check_int(hi, "hi", lo=lo)
  n = jnp.asarray(pred_valid).sum(-1)
  return ((n >= lo) & (n <= hi)).astype(jnp.float32)


def repeat_count(pred_emb: jax.Array, pred_valid: jax.Array,
                 repeat_threshold: float = 0.999) -> jax.Array:
  """``(...,)`` int32: valid predictions whose cosine to an earlier valid one is at least
  ``repeat_threshold`` (a set of ``n`` copies of one entity has ``n - 1`` repeats)."""
  pe, pv = _check_set(pred_emb, pred_valid, "pred")
  check_range(repeat_threshold, "repeat_threshold", lo=-1.0, hi=1.0)
  sim = cosine_similarity(pe, pe)
  p = pe.shape[-2]
  earlier = jnp.tril(jnp.ones((p, p), bool), -1)  # [j, i]: i < j
  dup = (sim >= repeat_threshold) & earlier & pv[..., None, :] & pv[..., :, None]
  return jnp.any(dup, -1).sum(-1).astype(jnp.int32)


def entity_reward(pred_emb: jax.Array, pred_valid: jax.Array, ref_emb: jax.Array,
                  ref_valid: jax.Array, *, format_ok: jax.typing.ArrayLike = True,
                  matching: str = "hungarian", count_range: tuple[int, int] = (1, 5),
                  repeat_threshold: float = 0.999) -> EntityReward:
  r"""CARE's entity reward :math:`R = R_\mathrm{sim} + R_\mathrm{count} + R_\mathrm{rep} +
  R_\mathrm{format}` of a proposed entity set (see the module docstring).

  Args:
    pred_emb: ``(..., P, D)`` predicted entity embeddings (padded to ``P``).
    pred_valid: ``(..., P)`` bool, the real predictions.
    ref_emb: ``(..., R, D)`` reference entity embeddings.
    ref_valid: ``(..., R)`` bool.
    format_ok: ``(...,)`` bool (or one bool): whether the output parsed.
    matching: ``"hungarian"`` (exact, the paper's) or ``"greedy"``.
    count_range: ``(lo, hi)`` number of entities rewarded by :math:`R_\mathrm{count}`.
    repeat_threshold: cosine at or above which a later prediction repeats an earlier one.

  Returns:
    :class:`EntityReward` with ``total`` and the four terms, each ``(...,)`` float32;
    at most 4 (a perfect, well-formed, repeat-free set of 1-5 entities).
  """
  pe, pv, re, rv = _check_pair(pred_emb, pred_valid, ref_emb, ref_valid)
  if not (isinstance(count_range, tuple | list) and len(count_range) == 2):
    raise ValueError(f"count_range must be a (lo, hi) pair, got {count_range!r}")
  fmt = jnp.asarray(format_ok)
  if fmt.dtype != jnp.bool_:
    raise TypeError(f"format_ok must be bool, got {fmt.dtype}")
  sim = similarity_reward(pe, pv, re, rv, matching=matching)
  count = count_reward(pv, *count_range)
  rep = 1.0 / (repeat_count(pe, pv, repeat_threshold) + 1.0)
  fmt = jnp.broadcast_to(fmt, sim.shape).astype(jnp.float32)
  return EntityReward(sim + count + rep + fmt, sim, count, rep.astype(jnp.float32), fmt)


def binary_set_reward(pred_ids: jax.Array, pred_valid: jax.Array, ref_ids: jax.Array,
                      ref_valid: jax.Array, num_classes: int) -> jax.Array:
  """``(...,)`` float32: 1 where the valid predicted ids equal the valid reference ids as
  multisets (order ignored), else 0 (the sparse verifiable-reward baseline)."""
  num_classes = check_int(num_classes, "num_classes", lo=1)
  pi, ri = jnp.asarray(pred_ids), jnp.asarray(ref_ids)
  if pi.shape != jnp.shape(pred_valid) or ri.shape != jnp.shape(ref_valid):
    raise ValueError(f"pred_ids / ref_ids must match pred_valid / ref_valid's shapes, got "
                     f"{pi.shape}, {jnp.shape(pred_valid)}, {ri.shape}, {jnp.shape(ref_valid)}")
  hist = lambda ids, v: jnp.sum(jax.nn.one_hot(ids, num_classes) * v[..., None], -2)  # noqa: E731
  return jnp.all(hist(pi, pred_valid) == hist(ri, ref_valid), -1).astype(jnp.float32)


# ----------------------------------------------------------------------------- confidence


def mask_confidence(mask: jax.Array, eps: float = 1e-7) -> jax.Array:
  r"""``(...,)`` :math:`C = 1 - \frac{1}{HW}\sum_{p} H(m_p) / \log 2` of soft masks
  ``(..., H, W)`` with values in ``[0, 1]`` (``H(m) = -m \log m - (1-m) \log(1-m)``):
  1 for a binary mask, 0 for an all-0.5 mask."""
  m = jnp.asarray(mask)
  if m.ndim < 2:
    raise ValueError(f"mask must be (..., H, W), got shape {m.shape}")
  if not jnp.issubdtype(m.dtype, jnp.floating):
    raise TypeError(f"mask must be floating point, got {m.dtype}")
  if not is_traced(m) and (jnp.any(m < 0) or jnp.any(m > 1)):
    raise ValueError("mask values must lie in [0, 1] (probabilities)")
  m = jnp.clip(m, eps, 1 - eps)
  h = -(m * jnp.log(m) + (1 - m) * jnp.log1p(-m))
  return 1.0 - h.mean((-2, -1)) / jnp.log(2.0)


def confidence_filter(mask: jax.Array, tau: jax.typing.ArrayLike = TAU) -> jax.Array:
  """``(...,)`` bool: keep the masks with :func:`mask_confidence` at least ``tau``."""
  check_range(tau, "tau", lo=0.0, hi=1.0)
  return mask_confidence(mask) >= tau


# ----------------------------------------------------------------------------- evidence


def mask_window(mask: jax.Array, size: int) -> jax.Array:
  """``(..., 2)`` int32 top-left ``(y, x)`` of the ``size x size`` window of largest mask
  mass (first in row-major order on ties)."""
  size = check_int(size, "size", lo=1)
  m = jnp.asarray(mask)
  h, w = m.shape[-2:]
  if size > min(h, w):
    raise ValueError(f"size must be at most the mask's side {min(h, w)}, got {size}")
  c = jnp.cumsum(jnp.cumsum(jnp.pad(m, [(0, 0)] * (m.ndim - 2) + [(1, 0), (1, 0)]), -2), -1)
  mass = (c[..., size:, size:] - c[..., :-size, size:] - c[..., size:, :-size]
          + c[..., :-size, :-size])  # (..., h - size + 1, w - size + 1) window sums
  flat = jnp.argmax(mass.reshape(*mass.shape[:-2], -1), -1)
  ww = w - size + 1
  return jnp.stack([flat // ww, flat % ww], -1).astype(jnp.int32)


def mask_centroid(mask: jax.Array, eps: float = 1e-6) -> jax.Array:
  """``(..., 2)`` float32 mass-weighted mean pixel ``(y, x)`` of soft masks ``(..., H, W)``
  (the image centre for an all-zero mask)."""
  m = jnp.asarray(mask, jnp.float32)
  h, w = m.shape[-2:]
  ys, xs = jnp.arange(h, dtype=jnp.float32), jnp.arange(w, dtype=jnp.float32)
  tot = m.sum((-2, -1))
  safe = jnp.maximum(tot, eps)
  cy = jnp.where(tot > eps, (m.sum(-1) * ys).sum(-1) / safe, (h - 1) / 2)
  cx = jnp.where(tot > eps, (m.sum(-2) * xs).sum(-1) / safe, (w - 1) / 2)
  return jnp.stack([cy, cx], -1)


def _crop(image, corner, size):
  return jax.lax.dynamic_slice(image, (corner[0], corner[1]), (size, size))


def evidence_views(image: jax.Array, mask: jax.Array, size: int,
                   background: float = -1.0) -> tuple[jax.Array, jax.Array]:
  """The two mask-based evidence views of ``image (..., H, W)`` from a soft ``mask``.

  * crop: the ``size x size`` window of ``image`` of largest mask mass (:func:`mask_window`);
  * masked: ``mask * image + (1 - mask) * background``, cropped at the ``size x size``
    window centred on the mask's centroid (clipped into the image).

  The third (global) view is ``image`` itself.

  Returns:
    ``(crop, masked)``, each ``(..., size, size)``.
  """
  size = check_int(size, "size", lo=1)
  img, m = jnp.asarray(image), jnp.asarray(mask)
  if img.shape != m.shape or img.ndim < 2:
    raise ValueError(f"image and mask must share a (..., H, W) shape, got {img.shape} and "
                     f"{m.shape}")
  h, w = img.shape[-2:]
  corner = mask_window(m, size)
  centre = mask_centroid(m)
  start = jnp.round(centre - (size - 1) / 2).astype(jnp.int32)
  start = jnp.clip(start, 0, jnp.array([h - size, w - size]))
  masked_img = m * img + (1 - m) * background
  batch = img.shape[:-2]
  crop_all = jax.vmap(_crop, (0, 0, None))
  crop = crop_all(img.reshape(-1, h, w), corner.reshape(-1, 2), size)
  masked = crop_all(masked_img.reshape(-1, h, w), start.reshape(-1, 2), size)
  return crop.reshape(*batch, size, size), masked.reshape(*batch, size, size)


def majority_vote(votes: jax.Array, valid: jax.Array, num_classes: int) -> jax.Array:
  """``(...,)`` int32 majority answer of ``V`` views' answers ``votes (..., V)`` (ints in
  ``[0, num_classes)``), counting only ``valid (..., V)`` views; a tie goes to the answer
  of the earliest valid view among the tied answers. All views invalid gives 0."""
  num_classes = check_int(num_classes, "num_classes", lo=1)
  v, ok = jnp.asarray(votes), jnp.asarray(valid)
  if v.shape != ok.shape or v.ndim < 1:
    raise ValueError(f"votes and valid must share a (..., V) shape, got {v.shape} and "
                     f"{ok.shape}")
  if ok.dtype != jnp.bool_:
    raise TypeError(f"valid must be bool, got {ok.dtype}")
  n_views = v.shape[-1]
  # count + a binary-fraction tie-breaker: sum of 2^-(i+1) over supporting views i is
  # largest for the set holding the earliest view, and always below 1
  weight = 1.0 + 0.5 ** (np.arange(n_views) + 1.0)
  onehot = jax.nn.one_hot(v, num_classes) * (ok[..., None] * weight[:, None])
  return jnp.argmax(onehot.sum(-2), -1).astype(jnp.int32)
