"""Digit-pair images with relational captions: the compositional test bed of Test-Time Matching.

An image shows two of scikit-learn's 8 x 8 digits side by side (8 x 16
pixels; the ``"unit_images"`` variant of :func:`jaxlab.data.digits.load_digits`),
its caption is the three tokens ``[a, LEFT_OF, b]`` ("a left of b"). A test
*group* holds the images ``(a|b)`` and ``(b|a)`` (the same two digit images
swapped) and the captions "a left of b" and "b left of a": the two captions
share their bag of words, so only a model that reads order scores the group
right.

Pre-training batches (:func:`pretraining_batch`) draw each unordered digit
pair at most once, in a random order, so contrastive pre-training never needs
order to tell a batch's captions apart: an encoder learns digit identity well
and order only incidentally, the bag-of-words bias the Test-Time Matching
paper finds in CLIP-style models. The encoder and its training live in
:mod:`jaxlab.preference.digit_pairs`.

Example:
  >>> data = load_split(seed=0)
  >>> groups = make_groups(jax.random.key(1), data.test_images, data.test_labels, 200)
  >>> groups.images.shape, groups.tokens.shape                    # (200, 2, 128), (200, 2, 3)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.digits import load_digits

LEFT_OF = 10  # token id of the relation; digits are tokens 0-9
VOCAB = 11
IMAGE_DIM = 8 * 16


class DigitSplit(NamedTuple):
  train_images: np.ndarray  # (n, 8, 8) in [0, 1]
  train_labels: np.ndarray
  test_images: np.ndarray
  test_labels: np.ndarray


def load_split(seed: int = 0, test_fraction: float = 0.5) -> DigitSplit:
  """scikit-learn's bundled digits (offline), scaled to [0, 1], split per class."""
  if not 0 < test_fraction < 1:
    raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
  x, y = load_digits("unit_images")
  rng = np.random.default_rng(seed)
  test = np.zeros(len(y), bool)
  for c in range(10):
    idx = rng.permutation(np.flatnonzero(y == c))
    test[idx[: int(round(test_fraction * len(idx)))]] = True
  return DigitSplit(x[~test], y[~test], x[test], y[test])


def pair_image(left: jax.Array, right: jax.Array) -> jax.Array:
  """Two ``(..., 8, 8)`` digits side by side, flattened to ``(..., 128)``."""
  return jnp.concatenate([left, right], axis=-1).reshape(*left.shape[:-2], IMAGE_DIM)


def caption(a: jax.Array, b: jax.Array) -> jax.Array:
  """Tokens of "a left of b": ``(..., 3)`` int32."""
  a = jnp.asarray(a, jnp.int32)
  return jnp.stack([a, jnp.full_like(a, LEFT_OF), jnp.asarray(b, jnp.int32)], axis=-1)


def _sample_of_class(key, by_class, counts, cls):
  """A random image index of each requested class."""
  u = jax.random.uniform(key, cls.shape)
  pos = jnp.floor(u * counts[cls]).astype(jnp.int32)
  return by_class[cls, pos]


def _class_table(labels: np.ndarray):
  counts = np.bincount(labels, minlength=10)
  table = np.zeros((10, counts.max()), np.int32)
  for c in range(10):
    idx = np.flatnonzero(labels == c)
    table[c, : len(idx)] = idx
  return jnp.asarray(table), jnp.asarray(counts)


def pretraining_batch(key: jax.Array, images, labels, batch: int = 32, order_noise=0.0):
  """``batch`` (image, caption) pairs, each unordered digit pair at most once.

  With probability ``order_noise`` a caption names the two digits in the wrong
  order (web captions often get layout wrong): 0.5 carries no order
  information, 0 is always right. Returns ``(images (batch, 128), tokens
  (batch, 3))``. ``batch <= 45`` (the number of unordered pairs of distinct
  digits).
  """
  if not 1 <= batch <= 45:
    raise ValueError(f"batch must be in [1, 45] (distinct unordered digit pairs), got {batch}")
  images = jnp.asarray(images)
  table, counts = _class_table(np.asarray(labels))
  iu = np.triu_indices(10, 1)
  pairs = jnp.asarray(np.stack(iu, -1))  # (45, 2)
  k1, k2, k3, k4, k5 = jax.random.split(key, 5)
  chosen = pairs[jax.random.permutation(k1, 45)[:batch]]
  flip = jax.random.bernoulli(k2, 0.5, (batch,))
  a = jnp.where(flip, chosen[:, 1], chosen[:, 0])
  b = jnp.where(flip, chosen[:, 0], chosen[:, 1])
  ia = _sample_of_class(k3, table, counts, a)
  ib = _sample_of_class(k4, table, counts, b)
  wrong = jax.random.bernoulli(k5, order_noise, (batch,))
  return (pair_image(images[ia], images[ib]),
          caption(jnp.where(wrong, b, a), jnp.where(wrong, a, b)))


class Groups(NamedTuple):
  """``G`` test groups: images ``(G, 2, 128)`` = ``(a|b), (b|a)``; tokens ``(G, 2, 3)``."""
  images: jax.Array
  tokens: jax.Array


def make_groups(key: jax.Array, images, labels, num_groups: int) -> Groups:
  """Groups of two swapped digit images and their two order-only-different captions."""
  if num_groups < 1:
    raise ValueError(f"num_groups must be >= 1, got {num_groups}")
  images = jnp.asarray(images)
  table, counts = _class_table(np.asarray(labels))
  k1, k2, k3, k4 = jax.random.split(key, 4)
  a = jax.random.randint(k1, (num_groups,), 0, 10)
  b = (a + jax.random.randint(k2, (num_groups,), 1, 10)) % 10  # b != a
  xa = images[_sample_of_class(k3, table, counts, a)]
  xb = images[_sample_of_class(k4, table, counts, b)]
  imgs = jnp.stack([pair_image(xa, xb), pair_image(xb, xa)], axis=1)
  toks = jnp.stack([caption(a, b), caption(b, a)], axis=1)
  return Groups(imgs, toks)


__all__ = ["IMAGE_DIM", "LEFT_OF", "VOCAB", "DigitSplit", "Groups", "caption", "load_split",
           "make_groups", "pair_image", "pretraining_batch"]
