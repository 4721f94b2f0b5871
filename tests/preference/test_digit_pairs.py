"""Digit-pair groups, the pre-training batches and the masked CLIP loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.preference import digit_pairs as D


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


def test_clip_loss_by_hand_and_masking():
  s = jnp.array([[2.0, 0.0], [1.0, 3.0]])
  row = [np.log(np.exp(2) + 1) - 2, np.log(np.exp(1) + np.exp(3)) - 3]
  col = [np.log(np.exp(2) + np.exp(1)) - 2, np.log(1 + np.exp(3)) - 3]
  np.testing.assert_allclose(D.clip_loss(s), np.mean([(r + c) / 2 for r, c in zip(row, col,
                                                                                     strict=True)]),
                             rtol=1e-6)
  # Dropping item 1 leaves item 0 alone: no negatives, zero loss.
  np.testing.assert_allclose(D.clip_loss(s, jnp.array([1.0, 0.0])), 0.0, atol=1e-7)
