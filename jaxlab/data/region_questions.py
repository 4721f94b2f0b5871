"""Questions about the digit in a region of a digit canvas (CARE's test bed).

Each scene is a :mod:`jaxlab.data.digit_layouts` canvas (default 24 x 24, background
``-1``) holding two 8 x 8 digits of different classes whose box centres lie in different
quadrants (the regions: top-left, top-right, bottom-left, bottom-right; a box centre on the
middle line counts as the lower / right half). A question names a region holding a digit
and an attribute (:data:`ATTRIBUTES`: "is it odd?", "is it greater than 4?"); the answer is
the attribute of that digit's class. Per scene, Gaussian pixel noise of a standard
deviation drawn uniformly from ``[0, noise]`` is added (values clipped to ``[-1, 1]``), so
some scenes are hard to segment. The segmentation target is the queried digit's box.

Our stand-in for CARE's medical VQA: the region plays the referred entity (a lesion or an
organ), the box mask the expert segmentation, the digit class the finding.

Example:
  >>> q = make_questions(jax.random.key(0), 512, noise=0.6)
  >>> q.images.shape, q.masks.shape, q.answers.mean()   # (512, 24, 24) twice, about 0.5
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxlab.core.checks import check_int, check_range
from jaxlab.data import digit_layouts as dl

__all__ = ["ATTRIBUTES", "NUM_REGIONS", "REGIONS", "RegionQuestions", "answer_of",
           "make_questions", "region_maps", "regions_of"]

REGIONS = ("top-left", "top-right", "bottom-left", "bottom-right")
NUM_REGIONS = len(REGIONS)
ATTRIBUTES = ("odd", "greater than 4")


class RegionQuestions(NamedTuple):
  """``N`` questions (shapes below; ``S`` the canvas side)."""

  images: np.ndarray  # (N, S, S) float32 canvases in [-1, 1], noise included
  regions: np.ndarray  # (N,) int32 queried region (index into REGIONS)
  attributes: np.ndarray  # (N,) int32 asked attribute (index into ATTRIBUTES)
  answers: np.ndarray  # (N,) int32 0 / 1
  digits: np.ndarray  # (N,) int32 class of the queried digit
  masks: np.ndarray  # (N, S, S) float32 box of the queried digit (1 inside)
  boxes: np.ndarray  # (N, 4) int32 its box (y0, x0, y1, x1), exclusive ends
  noise: np.ndarray  # (N,) float32 the scene's noise standard deviation

  def __len__(self) -> int:
    return self.images.shape[0]


def answer_of(digits, attributes) -> np.ndarray:
  """``(N,)`` int32 answers: ``digit % 2`` for "odd", ``digit > 4`` for "greater than 4"."""
  d, a = np.asarray(digits), np.asarray(attributes)
  return np.where(a == 0, d % 2, d > 4).astype(np.int32)


def regions_of(boxes: np.ndarray, canvas: int = dl.CANVAS) -> np.ndarray:
  """``(...,)`` int32 quadrant of each box ``(..., 4)`` by its centre."""
  b = np.asarray(boxes)
  cy, cx = (b[..., 0] + b[..., 2]) / 2, (b[..., 1] + b[..., 3]) / 2
  return (2 * (cy >= canvas / 2) + (cx >= canvas / 2)).astype(np.int32)


def region_maps(regions, canvas: int = dl.CANVAS) -> np.ndarray:
  """``(N, S, S)`` float32 indicator of each queried quadrant (a network's query input)."""
  r = np.asarray(regions)
  ys = np.arange(canvas)[:, None] >= canvas / 2
  xs = np.arange(canvas)[None, :] >= canvas / 2
  quad = (2 * ys + xs).astype(np.int32)  # (S, S)
  return (quad[None] == r[:, None, None]).astype(np.float32)


def make_questions(key: jax.Array, n: int, *, canvas: int = dl.CANVAS,
                   noise: float = 0.0) -> RegionQuestions:
  """``n`` region questions (see the module docstring).

  Args:
    key: PRNG key (the same key gives the same questions).
    n: number of questions (one per scene).
    canvas: canvas side in pixels (at least 16).
    noise: largest per-scene pixel-noise standard deviation, ``>= 0``.
  """
  check_int(n, "n", lo=1)
  check_int(canvas, "canvas", lo=2 * dl.DIGIT)
  check_range(noise, "noise", lo=0.0)
  k_lay, k_render, k_q = jax.random.split(key, 3)
  rng = np.random.default_rng(np.asarray(jax.random.key_data(k_q)).ravel().tolist())
  # two-digit layouts with their boxes in different quadrants (rejection)
  keep, draws = [], 0
  while sum(len(k.names) for k in keep) < n:
    lay = dl.random_layouts(jax.random.fold_in(k_lay, draws), 2 * n, canvas=canvas,
                            two_prob=1.0)
    draws += 1
    reg = regions_of(lay.boxes, canvas)
    keep.append(lay.take(np.flatnonzero(reg[:, 0] != reg[:, 1])))
  lay = dl.Layout(*(np.concatenate(f)[:n] for f in zip(*keep, strict=True)))
  # different classes in one scene: the second is shifted by 1..9 from the first
  names = lay.names.copy()
  names[:, 1] = (names[:, 0] + rng.integers(1, 10, n)) % 10
  lay = dl.Layout(lay.boxes, names.astype(np.int32), lay.valid)
  images = dl.render(k_render, lay, canvas=canvas).reshape(n, canvas, canvas)
  which = rng.integers(0, 2, n)
  rows = np.arange(n)
  boxes = lay.boxes[rows, which]
  digits = lay.names[rows, which]
  attributes = rng.integers(0, len(ATTRIBUTES), n).astype(np.int32)
  sigma = rng.uniform(0.0, noise, n).astype(np.float32)
  noisy = images + sigma[:, None, None] * rng.standard_normal(images.shape).astype(np.float32)
  masks = np.zeros((n, canvas, canvas), np.float32)
  for i, (y0, x0, y1, x1) in enumerate(boxes):
    masks[i, y0:y1, x0:x1] = 1.0
  return RegionQuestions(np.clip(noisy, -1.0, 1.0).astype(np.float32),
                         regions_of(boxes, canvas), attributes, answer_of(digits, attributes),
                         digits.astype(np.int32), masks, boxes.astype(np.int32), sigma)
