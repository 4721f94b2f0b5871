r"""Rotated digits: four rotation domains of scikit-learn's 8 x 8 digits with asymmetric label
noise and leave-one-domain-out splits (DL4ND's test bed).

Our stand-in for RotatedMNIST (DomainBed's domains are MNIST rotated by 0-75 degrees; the
DL4ND spec asks for right-angle rotations so that the rotation is exact on a pixel grid):

1. the 1,797 digits of :func:`jaxlab.data.digits.load_digits` ``("signed")`` (pixels in
   ``[-1, 1]``) are shuffled by the seed and cut into :data:`NUM_DOMAINS` disjoint domains of
   equal size (``1797 // 4 = 449``; the one left over is dropped), so no digit appears in two
   domains (as DomainBed splits MNIST);
2. domain ``d`` is rotated counter-clockwise by ``ANGLES[d]`` (0, 90, 180, 270 degrees;
   :func:`rotate`, equal to ``np.rot90(image, d)``; ``angles=SMALL_ANGLES`` gives the
   RotatedMNIST-like ablation with 15-degree steps, bilinear, :func:`rotate_degrees`);
3. :func:`leave_one_out` holds one domain out (the out-of-domain test set), keeps
   ``id_test_fraction`` of every other domain as the clean in-domain test set, and corrupts
   the training labels by :func:`asymmetric_noise`: in every (domain, class) group exactly
   ``round(rate * n)`` labels ``c`` become ``(c + 1) mod 10``.

The randomness is host NumPy (``np.random.default_rng((seed, stream))``): the data are
built once per split on the host, and no device program is compiled for them. Every shape
depends only on the fractions, not on the seed or the held-out domain (449 per
domain, ``round(id_test_fraction * 449)`` in-domain test rows per training domain), so the
programs of one experiment compile once.

Example:
  >>> s = leave_one_out(0, held_out=3)
  >>> s.x.shape, s.noisy_labels.shape, s.ood_x.shape        # ((1077, 64), (1077,), (449, 64))
  >>> float((s.noisy_labels != s.labels).mean())            # about 0.3
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxlab.core.checks import check_int, check_range
from jaxlab.data.digits import load_digits

__all__ = ["ANGLES", "NUM_CLASSES", "NUM_DOMAINS", "SMALL_ANGLES", "DomainSplit",
           "asymmetric_noise", "domains", "leave_one_out", "rotate", "rotate_degrees"]

ANGLES = (0, 90, 180, 270)  # degrees, counter-clockwise; domain d is rotated by ANGLES[d]
SMALL_ANGLES = (0, 15, 30, 45)  # the ablation with neighbouring domains (bilinear rotations)
NUM_DOMAINS = len(ANGLES)
NUM_CLASSES = 10
SIDE = 8


def rotate(images: Any, k: int) -> np.ndarray:
  """Rotates ``(..., H, W)`` images by ``k`` quarter turns counter-clockwise.

  Built from transposes and flips (a quarter turn is ``out[i, j] = in[j, W - 1 - i]``): the
  same as ``np.rot90(images, k, axes=(-2, -1))``, which the tests check it against.

  Raises:
    ValueError: ``images`` with fewer than 2 dimensions, or ``k`` not an int.
  """
  a = np.asarray(images)
  if a.ndim < 2:
    raise ValueError(f"images must have shape (..., H, W), got {a.shape}")
  k = check_int(k, "k") % 4
  for _ in range(k):
    a = np.flip(np.swapaxes(a, -1, -2), axis=-2)  # one quarter turn counter-clockwise
  return np.ascontiguousarray(a)


def asymmetric_noise(rng: np.random.Generator, labels: Any, groups: Any, rate: float,
                     num_classes: int = NUM_CLASSES) -> tuple[np.ndarray, np.ndarray]:
  """Flips exactly ``round(rate * n_g)`` labels of every group ``g`` from ``c`` to ``c + 1``.

  The asymmetric (class-dependent) noise of the noisy-label literature (DivideMix's
  CIFAR-10 "asym", DL4ND's ``c -> c + 1``), with the flipped rows of each group drawn
  uniformly by ``rng``. Pass ``groups = domain * num_classes + label`` for an exact rate in
  every (domain, class) cell.

  Args:
    rng: a ``np.random.Generator`` (host data: no device program to compile).
    labels: ``(N,)`` ints in ``[0, num_classes)``.
    groups: ``(N,)`` ints, the group of each row.
    rate: the flipped fraction of each group, in ``[0, 1]``.
    num_classes: the label range.

  Returns:
    ``(noisy (N,) int32, flipped (N,) bool)``.

  Raises:
    ValueError: labels out of range, shapes that differ, or ``rate`` outside ``[0, 1]``.
  """
  if not isinstance(rng, np.random.Generator):
    raise TypeError(f"rng must be a np.random.Generator, got {type(rng).__name__}")
  labels = np.asarray(labels)
  groups = np.asarray(groups)
  num_classes = check_int(num_classes, "num_classes", lo=2)
  rate = float(check_range(rate, "rate", lo=0.0, hi=1.0))
  if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
    raise ValueError(f"labels must be a 1-D int array, got {labels.dtype}{list(labels.shape)}")
  if groups.shape != labels.shape or not np.issubdtype(groups.dtype, np.integer):
    raise ValueError(f"groups must be ints of the labels' shape {labels.shape}, got "
                     f"{groups.dtype}{list(groups.shape)}")
  if np.any((labels < 0) | (labels >= num_classes)):
    raise ValueError(f"labels must be in [0, {num_classes - 1}]")
  u = rng.random(labels.shape)
  order = np.lexsort((u, groups))  # rows grouped, a uniform random order inside each group
  sorted_groups = groups[order]
  starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
  sizes = np.diff(np.r_[starts, labels.size])
  rank = np.arange(labels.size) - np.repeat(starts, sizes)  # position inside the group
  budget = np.repeat(np.round(rate * sizes).astype(np.int64), sizes)
  flipped = np.zeros(labels.shape, bool)
  flipped[order] = rank < budget
  noisy = np.where(flipped, (labels + 1) % num_classes, labels).astype(np.int32)
  return noisy, flipped


class DomainSplit(NamedTuple):
  """One leave-one-domain-out split (flat ``(N, 64)`` digits in ``[-1, 1]``).

  Attributes:
    x: ``(N, 64)`` training digits of the training domains.
    labels: ``(N,)`` their true labels.
    noisy_labels: ``(N,)`` the labels training sees (``labels`` after the noise).
    domain: ``(N,)`` each training row's domain (never ``held_out``).
    id_x, id_labels, id_domain: the clean in-domain test rows of the training domains.
    ood_x, ood_labels: the held-out domain, every row (clean labels).
    held_out: the held-out domain.
  """

  x: np.ndarray
  labels: np.ndarray
  noisy_labels: np.ndarray
  domain: np.ndarray
  id_x: np.ndarray
  id_labels: np.ndarray
  id_domain: np.ndarray
  ood_x: np.ndarray
  ood_labels: np.ndarray
  held_out: int


def rotate_degrees(images: Any, angle: float) -> np.ndarray:
  """Rotates ``(..., 8, 8)`` images in ``[-1, 1]`` by ``angle`` degrees counter-clockwise.

  A multiple of 90 degrees is the exact :func:`rotate`; any other angle is bilinear
  (``scipy.ndimage.rotate``, ``order=1``, the canvas kept, background -1), the interpolated
  RotatedMNIST-style domains of the ablation with small angles.
  """
  a = np.asarray(images, np.float32)
  if a.ndim < 2:
    raise ValueError(f"images must have shape (..., H, W), got {a.shape}")
  angle = float(check_range(angle, "angle"))
  if angle % 90 == 0:
    return rotate(a, int(angle // 90))
  from scipy import ndimage

  # a positive angle in the (rows, columns) plane turns the same way as np.rot90
  out = ndimage.rotate(a + 1.0, angle, axes=(a.ndim - 2, a.ndim - 1), reshape=False, order=1,
                       mode="constant", cval=0.0) - 1.0
  return np.clip(out, -1.0, 1.0).astype(np.float32)


def _check_angles(angles: Any) -> tuple[float, ...]:
  if not isinstance(angles, tuple | list) or len(angles) != NUM_DOMAINS:
    raise ValueError(f"angles must be a tuple of {NUM_DOMAINS} angles in degrees (one per "
                     f"domain), got {angles!r}")
  return tuple(float(check_range(a, "angles")) for a in angles)


def domains(seed: int, angles: tuple[float, ...] = ANGLES) -> tuple[np.ndarray, np.ndarray]:
  """The four rotated domains of one seed: ``x (4, 449, 64)`` and ``labels (4, 449)``.

  Args:
    seed: int seed (>= 0) of the digits' assignment to domains.
    angles: each domain's rotation in degrees (default :data:`ANGLES`: exact quarter turns).

  Raises:
    ValueError: a negative or non-int seed, or not four finite angles.
  """
  seed = check_int(seed, "seed", lo=0)
  angles = _check_angles(angles)
  d = load_digits("signed")
  per = d.x.shape[0] // NUM_DOMAINS
  order = np.random.default_rng((seed, 0)).permutation(d.x.shape[0])
  order = order[:per * NUM_DOMAINS].reshape(NUM_DOMAINS, per)
  images = d.x[order].reshape(NUM_DOMAINS, per, SIDE, SIDE)
  x = np.stack([rotate_degrees(images[i], angle) for i, angle in enumerate(angles)])
  return x.reshape(NUM_DOMAINS, per, SIDE * SIDE).astype(np.float32), d.y[order].copy()


def leave_one_out(seed: int, held_out: int, *, noise_rate: float = 0.3,
                  id_test_fraction: float = 0.2,
                  angles: tuple[float, ...] = ANGLES) -> DomainSplit:
  """The split of one seed with domain ``held_out`` left out (see the module docstring).

  The domains, the in-domain test rows and the noise all come from ``seed``; the domains and
  in-domain test rows are the same for every ``held_out`` of one seed.

  Args:
    seed: int seed (>= 0).
    held_out: the out-of-domain test domain, in ``[0, 4)``.
    noise_rate: fraction of training labels flipped ``c -> c + 1`` in every (domain, class).
    id_test_fraction: fraction of each training domain kept (clean) as in-domain test rows.
    angles: each domain's rotation in degrees (:func:`domains`).

  Raises:
    ValueError: ``held_out`` outside ``[0, 4)``, a rate outside ``[0, 1]``, or a test
      fraction outside ``(0, 1)``.
  """
  held_out = check_int(held_out, "held_out", lo=0, hi=NUM_DOMAINS - 1)
  noise_rate = float(check_range(noise_rate, "noise_rate", lo=0.0, hi=1.0))
  id_test_fraction = float(check_range(id_test_fraction, "id_test_fraction", lo=0.0, hi=1.0,
                                       lo_open=True, hi_open=True))
  x, y = domains(seed, angles)
  per = x.shape[1]
  n_test = int(round(id_test_fraction * per))
  rng_test = np.random.default_rng((seed, 1))
  test_order = np.stack([rng_test.permutation(per) for _ in range(NUM_DOMAINS)])
  train_domains = [d for d in range(NUM_DOMAINS) if d != held_out]
  parts = {"x": [], "y": [], "d": [], "id_x": [], "id_y": [], "id_d": []}
  for d in train_domains:
    test, train = test_order[d, :n_test], np.sort(test_order[d, n_test:])
    parts["x"].append(x[d, train])
    parts["y"].append(y[d, train])
    parts["d"].append(np.full(train.size, d, np.int32))
    parts["id_x"].append(x[d, test])
    parts["id_y"].append(y[d, test])
    parts["id_d"].append(np.full(test.size, d, np.int32))
  cat = {k: np.concatenate(v) for k, v in parts.items()}
  noisy, _ = asymmetric_noise(np.random.default_rng((seed, 2, held_out)), cat["y"],
                              cat["d"] * NUM_CLASSES + cat["y"], noise_rate)
  return DomainSplit(cat["x"], cat["y"].astype(np.int32), noisy, cat["d"],
                     cat["id_x"], cat["id_y"].astype(np.int32), cat["id_d"],
                     x[held_out].copy(), y[held_out].astype(np.int32), held_out)
