"""The sample-quality yardstick: Frechet distance against closed forms and scipy, the classifier."""

import numpy as np
import pytest
import scipy.linalg

from jaxlab.models import sample_quality as sq


@pytest.fixture(scope="module")
def yardstick():
  return sq.Yardstick.create(0)


def test_frechet_diagonal_by_hand():
  # commuting (diagonal) covariances: sum (sqrt(a) - sqrt(b))^2 + |mu1 - mu2|^2
  mu1, mu2 = np.array([1.0, 0.0, -2.0]), np.array([0.0, 2.0, -2.0])
  a, b = np.array([4.0, 1.0, 9.0]), np.array([1.0, 1.0, 16.0])
  expected = 1.0 + 4.0 + 0.0 + (2 - 1) ** 2 + 0.0 + (3 - 4) ** 2   # = 7
  assert sq.frechet_distance(mu1, np.diag(a), mu2, np.diag(b)) == pytest.approx(expected,
                                                                                abs=1e-10)
  assert expected == 7.0


def test_frechet_general_vs_scipy_sqrtm():
  rng = np.random.default_rng(0)
  d = 6
  m1, m2 = rng.normal(size=(d, d)), rng.normal(size=(d, d))
  c1, c2 = m1 @ m1.T + 0.1 * np.eye(d), m2 @ m2.T + 0.1 * np.eye(d)
  mu1, mu2 = rng.normal(size=d), rng.normal(size=d)
  covmean = scipy.linalg.sqrtm(c1 @ c2).real
  ref = np.sum((mu1 - mu2) ** 2) + np.trace(c1 + c2 - 2 * covmean)
  got = sq.frechet_distance(mu1, c1, mu2, c2)
  assert got == pytest.approx(ref, rel=1e-8)
  assert got == pytest.approx(sq.frechet_distance(mu2, c2, mu1, c1), rel=1e-10)  # symmetric
  # singular (rank-deficient) covariances stay finite and non-negative
  low = m1[:, :2] @ m1[:, :2].T
  assert sq.frechet_distance(mu1, low, mu1, low) == pytest.approx(0.0, abs=1e-6)


def test_frechet_features_identical_and_symmetric():
  rng = np.random.default_rng(1)
  f1, f2 = rng.normal(size=(300, 5)), rng.normal(1.0, 2.0, size=(400, 5))
  assert sq.frechet_distance_features(f1, f1) == pytest.approx(0.0, abs=1e-9)
  d12, d21 = sq.frechet_distance_features(f1, f2), sq.frechet_distance_features(f2, f1)
  assert d12 == pytest.approx(d21, rel=1e-10)
  mu, cov = sq.gaussian_stats(f2)
  np.testing.assert_allclose(cov, np.cov(f2, rowvar=False), rtol=1e-12)
  np.testing.assert_allclose(mu, f2.mean(0), rtol=1e-12)
  # population values: mean shift 1 per dim, std 2 vs 1: 5 * (1 + (2 - 1)^2) = 10
  assert d12 == pytest.approx(10.0, rel=0.25)


def test_bad_input_named():
  with pytest.raises(ValueError, match="features1 needs at least 2 samples"):
    sq.frechet_distance_features(np.zeros((1, 3)), np.zeros((5, 3)))
  with pytest.raises(ValueError, match="same feature dimension"):
    sq.frechet_distance_features(np.zeros((4, 3)), np.zeros((5, 2)))
  with pytest.raises(ValueError, match="cov2 must have shape"):
    sq.frechet_distance(np.zeros(2), np.eye(2), np.zeros(2), np.eye(3))
  with pytest.raises(ValueError, match="features must be 2-D"):
    sq.gaussian_stats(np.zeros(4))
  with pytest.raises(ValueError, match="test_fraction"):
    sq.YardstickConfig(test_fraction=1.0)
  with pytest.raises(TypeError, match="seed"):
    sq.Yardstick.create(0.5)


def test_classifier_and_distance(yardstick):
  ys = yardstick
  # measured 0.976 / 0.971 / 0.987 for seeds 0 / 1 / 2
  assert ys.test_accuracy > 0.95
  assert ys.class_accuracy(ys.reference, ys.reference_labels) == pytest.approx(ys.test_accuracy)
  assert ys.features(ys.reference[:5]).shape == (5, ys.config.hidden[-1])
  half = len(ys.reference) // 2
  real = ys.frechet_distance(ys.reference[:half], ys.reference[half:])
  noise = ys.frechet_distance(np.random.default_rng(0).uniform(-1, 1, (400, 64)))
  assert real < 0.1 * noise
  assert ys.frechet_distance(ys.reference, ys.reference) == pytest.approx(0.0, abs=1e-6)
  with pytest.raises(ValueError, match=r"x must have shape \(num_samples, 64\)"):
    ys.features(np.zeros((3, 63)))
  with pytest.raises(ValueError, match="labels must be integers"):
    ys.class_accuracy(ys.reference[:3], np.zeros(4, int))
  with pytest.raises(ValueError, match="at least 2 samples"):
    ys.frechet_distance(ys.reference[:1])


def test_same_seed_same_result(yardstick):
  again = sq.Yardstick.create(0, sq.YardstickConfig())
  assert again.test_accuracy == yardstick.test_accuracy
  np.testing.assert_array_equal(again.features(again.reference[:50]),
                                yardstick.features(yardstick.reference[:50]))
