"""Digit-pair test bed: the per-class split, groups, and the pre-training batches."""

import jax
import numpy as np
import pytest

from jaxlab.data import digit_pairs as D
from jaxlab.data.digits import load_digits


@pytest.fixture(scope="module")
def data():
  return D.load_split(seed=0)


def _digits_of(image128, split, labels):
  """Recover (left, right) classes of a pair image by exact lookup in the split."""
  img = np.asarray(image128).reshape(8, 16)
  flat = split.reshape(len(split), -1)
  left = labels[np.flatnonzero((flat == img[:, :8].ravel()).all(1))[0]]
  right = labels[np.flatnonzero((flat == img[:, 8:].ravel()).all(1))[0]]
  return left, right


def test_split_is_disjoint_and_stratified(data):
  assert len(data.train_labels) + len(data.test_labels) == 1797
  assert set(np.unique(data.test_labels)) == set(range(10))
  assert 0.0 <= data.train_images.min() and data.train_images.max() <= 1.0


def test_groups_swap_images_and_caption_order(data):
  g = D.make_groups(jax.random.key(0), data.test_images, data.test_labels, 20)
  assert g.images.shape == (20, 2, 128) and g.tokens.shape == (20, 2, 3)
  for n in range(5):
    a, b = _digits_of(g.images[n, 0], data.test_images, data.test_labels)
    assert a != b
    np.testing.assert_array_equal(g.tokens[n, 0], [a, D.LEFT_OF, b])
    np.testing.assert_array_equal(g.tokens[n, 1], [b, D.LEFT_OF, a])
    np.testing.assert_array_equal(np.asarray(g.images[n, 1]).reshape(8, 16),
                                  np.roll(np.asarray(g.images[n, 0]).reshape(8, 16), 8, axis=1))


def test_pretraining_batches(data):
  x, t = D.pretraining_batch(jax.random.key(1), data.train_images, data.train_labels, 45)
  pairs = {tuple(sorted((int(a), int(b)))) for a, _, b in np.asarray(t)}
  assert len(pairs) == 45  # every unordered pair exactly once: order never needed
  for i in range(5):  # order_noise = 0: the caption reads the image left to right
    a, b = _digits_of(x[i], data.train_images, data.train_labels)
    np.testing.assert_array_equal(t[i], [a, D.LEFT_OF, b])
  _, t_wrong = D.pretraining_batch(jax.random.key(1), data.train_images, data.train_labels, 45,
                                   order_noise=1.0)
  np.testing.assert_array_equal(t_wrong[:, 0], t[:, 2])  # every caption swapped
  with pytest.raises(ValueError, match="batch"):
    D.pretraining_batch(jax.random.key(1), data.train_images, data.train_labels, 46)


def test_split_is_per_class_and_deterministic(data):
  unit = load_digits("unit_images")
  counts = np.bincount(unit.y, minlength=10)
  # half of each class, rounded, is held out; the images are the [0, 1] digits themselves
  np.testing.assert_array_equal(np.bincount(data.test_labels, minlength=10),
                                np.round(0.5 * counts).astype(int))
  flat = unit.x.reshape(len(unit.x), -1)
  rows = {r.tobytes(): i for i, r in enumerate(flat)}
  idx = [rows[im.reshape(-1).tobytes()] for im in data.test_images[:20]]
  np.testing.assert_array_equal(unit.y[idx], data.test_labels[:20])
  again = D.load_split(seed=0)
  np.testing.assert_array_equal(again.test_images, data.test_images)
  assert not np.array_equal(D.load_split(seed=1).test_labels, data.test_labels)
  with pytest.raises(ValueError, match="test_fraction"):
    D.load_split(test_fraction=1.0)
