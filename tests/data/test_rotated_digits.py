"""Rotated digits: rotations against np.rot90, the asymmetric noise's exact rate and mapping,
the leave-one-domain-out split."""

import numpy as np
import pytest

from jaxlab.data import rotated_digits as rd
from jaxlab.data.digits import load_digits


def test_rotate_matches_np_rot90():
  images = np.random.default_rng(0).normal(size=(3, 8, 8)).astype(np.float32)
  for k in (-1, 0, 1, 2, 3, 4, 5):
    np.testing.assert_array_equal(rd.rotate(images, k), np.rot90(images, k, axes=(1, 2)))
  np.testing.assert_array_equal(rd.rotate(images[0], 1), np.rot90(images[0]))
  for angle in (0, 90, 180, 270, -90):
    np.testing.assert_array_equal(rd.rotate_degrees(images, angle),
                                  np.rot90(images, angle // 90, axes=(1, 2)))
  # a bilinear turn just short of a quarter turns the same way (the border pixels see the
  # background)
  near = rd.rotate_degrees(np.clip(images, -1, 1), 89.99)
  np.testing.assert_allclose(near[:, 1:-1, 1:-1],
                             np.rot90(np.clip(images, -1, 1), 1, axes=(1, 2))[:, 1:-1, 1:-1],
                             atol=5e-3)
  with pytest.raises(ValueError, match="images"):
    rd.rotate(np.zeros(8), 1)
  with pytest.raises(TypeError, match="k"):
    rd.rotate(images, 1.0)


def test_asymmetric_noise_flips_exactly_the_rate_to_the_next_class():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, 700)
  groups = rng.integers(0, 7, 700)
  noisy, flipped = rd.asymmetric_noise(np.random.default_rng(1), labels, groups, 0.3)
  np.testing.assert_array_equal(noisy[flipped], (labels[flipped] + 1) % 10)
  np.testing.assert_array_equal(noisy[~flipped], labels[~flipped])
  assert np.all((labels[flipped] != 9) | (noisy[flipped] == 0))  # 9 -> 0
  for g in range(7):
    n = int(np.sum(groups == g))
    assert int(flipped[groups == g].sum()) == round(0.3 * n)
  again, _ = rd.asymmetric_noise(np.random.default_rng(1), labels, groups, 0.3)
  np.testing.assert_array_equal(again, noisy)
  other, _ = rd.asymmetric_noise(np.random.default_rng(2), labels, groups, 0.3)
  assert np.any(other != noisy)
  assert not rd.asymmetric_noise(rng, labels, groups, 0.0)[1].any()
  assert rd.asymmetric_noise(rng, labels, groups, 1.0)[1].all()
  with pytest.raises(ValueError, match="rate"):
    rd.asymmetric_noise(rng, labels, groups, 1.5)
  with pytest.raises(ValueError, match="labels must be in"):
    rd.asymmetric_noise(rng, labels + 1, groups, 0.3)
  with pytest.raises(TypeError, match="rng"):
    rd.asymmetric_noise(0, labels, groups, 0.3)


def test_leave_one_out_split():
  d = load_digits("signed")
  images = d.x.reshape(-1, 8, 8)
  s = rd.leave_one_out(3, held_out=1)
  assert s.x.shape == (3 * 359, 64) and s.id_x.shape == (3 * 90, 64)
  assert s.ood_x.shape == (449, 64) and set(np.unique(s.domain)) == {0, 2, 3}
  # every row is a digit of scikit-learn's set turned by its domain's angle, with its label
  for x, y, dom in ((s.x[:5], s.labels[:5], s.domain[:5]), (s.ood_x[:5], s.ood_labels[:5],
                                                            np.ones(5, int))):
    for row, label, di in zip(x, y, dom, strict=True):
      back = np.rot90(row.reshape(8, 8), -rd.ANGLES[di] // 90)
      match = np.flatnonzero(np.all(images == back, axis=(1, 2)))
      assert match.size and label in d.y[match]
  # the noise: exact per (domain, class), c -> c + 1
  flipped = s.noisy_labels != s.labels
  np.testing.assert_array_equal(s.noisy_labels[flipped], (s.labels[flipped] + 1) % 10)
  for dom in (0, 2, 3):
    for c in range(10):
      cell = (s.domain == dom) & (s.labels == c)
      assert flipped[cell].sum() == round(0.3 * cell.sum())
  # the same seed gives the same split; the domains and ID test rows do not depend on the
  # held-out domain
  again = rd.leave_one_out(3, held_out=1)
  np.testing.assert_array_equal(again.noisy_labels, s.noisy_labels)
  other = rd.leave_one_out(3, held_out=2)
  np.testing.assert_array_equal(other.x[:359], s.x[:359])  # domain 0's training rows
  # held out, domain 2 is all its rows: the training and ID test rows it had before
  had = np.concatenate([s.x[s.domain == 2], s.id_x[s.id_domain == 2]])
  np.testing.assert_array_equal(np.unique(other.ood_x, axis=0), np.unique(had, axis=0))
  assert rd.leave_one_out(3, 1, noise_rate=0.0).noisy_labels.tolist() == s.labels.tolist()
  with pytest.raises(ValueError, match="held_out"):
    rd.leave_one_out(0, 4)
  with pytest.raises(ValueError, match="angles"):
    rd.leave_one_out(0, 0, angles=(0, 90))
