"""scikit-learn's bundled 8 x 8 digits, loaded once, in named preprocessing variants.

The 1,797 digits ship with scikit-learn (no download). :func:`load_digits` reads
them once per process and returns one of the variants the methods use, each
with the exact preprocessing its recorded results were produced with:

========================  ===============  =====================  =================================
variant                   ``x`` shape      values                 used by
========================  ===============  =====================  =================================
``"pixels"``              ``(1797, 64)``   0..16 (as stored)      matching (``digits_l1``), optim
                                                                  (:func:`~jaxlab.data.optim_problems.load_classification`
                                                                  standardizes on its train split)
``"unit_images"``         ``(1797, 8, 8)`` ``[0, 1]``: ``/ 16``   TTM's digit pairs
``"signed"``              ``(1797, 64)``   ``[-1, 1]``: ``/8 - 1`` alpha-DPO's digits task
========================  ===============  =====================  =================================

Every variant is float32 (the scaling is done in float64, then cast, as the
original loaders did) with int32 labels ``y``; the arrays are read-only (they
are shared by every caller).

Example:
  >>> d = load_digits("signed")
  >>> d.x.shape, d.x.min(), d.x.max(), d.y[:3]
  ((1797, 64), -1.0, 1.0, array([0, 1, 2], dtype=int32))
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

VARIANTS = ("pixels", "unit_images", "signed")


class Digits(NamedTuple):
  """One variant of the digits: features ``x`` (float32) and labels ``y`` (int32, 0-9)."""

  x: np.ndarray
  y: np.ndarray


@functools.cache
def _raw() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(data (1797, 64) float64, images (1797, 8, 8) float64, target int64)``, read once."""
  from sklearn.datasets import load_digits as sk_load_digits

  d = sk_load_digits()
  return d.data, d.images, d.target


def _frozen(a: np.ndarray) -> np.ndarray:
  a.setflags(write=False)
  return a


def load_digits(variant: str = "pixels") -> Digits:
  """The digits in one preprocessing variant (cached: computed once per process).

  Args:
    variant: ``"pixels"`` (flat, 0..16), ``"unit_images"`` (8 x 8 images in
      ``[0, 1]``) or ``"signed"`` (flat, ``[-1, 1]``); see the module docstring.

  Returns:
    A :class:`Digits` of read-only arrays (copy before writing into them).
  """
  if variant not in VARIANTS:
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
  return _variant(variant)


@functools.cache
def _variant(variant: str) -> Digits:
  data, images, target = _raw()
  if variant == "pixels":
    x = data.astype(np.float32)
  elif variant == "unit_images":
    x = (images / 16.0).astype(np.float32)
  else:  # signed: pixels 0..16 -> [-1, 1]
    x = (data / 8.0 - 1.0).astype(np.float32)
  return Digits(_frozen(x), _frozen(target.astype(np.int32)))
