"""Optimization test problems: objectives by hand, and the classification loaders."""

import jax
import jax.numpy as jnp
import numpy as np
import tensorflow_datasets as tfds
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab.data.optim_problems import load_classification, make_least_squares, rosenbrock


def test_rosenbrock_values():
  assert float(rosenbrock(jnp.ones((3, 3)))) == 0.0
  # Hand value at (0, 0): (1 - 0)^2 = 1; at (-1.2, 1): 100 * (1 - 1.44)^2 + 2.2^2 = 24.2.
  assert float(rosenbrock(jnp.zeros(2))) == 1.0
  np.testing.assert_allclose(float(rosenbrock(jnp.array([-1.2, 1.0]))), 24.2, rtol=1e-6)


def test_noiseless_least_squares_has_zero_loss_at_solution():
  p = make_least_squares(jax.random.key(0), num_rows=64, dim_in=8, dim_out=3)
  w = jnp.linalg.lstsq(p.a, p.b)[0]
  assert float(p.loss(w)) < 1e-8
  assert p.loss(w, jnp.arange(5)).shape == ()


def test_tfds_data_source_path_with_mock_data():
  # mock_data replaces the ArrayRecord reader behind tfds.data_source with random examples
  # of MNIST's features (no files, no TensorFlow): the loader's calls and decoding.
  with tfds.testing.mock_data(num_examples=12, policy=tfds.testing.MockPolicy.USE_CODE):
    data = load_classification("mnist")
  assert data.x_train.shape == (12, 784) and data.x_test.shape == (12, 784)
  assert data.y_train.dtype == np.int32


def test_digits_classification_split_and_standardization():
  from sklearn.model_selection import train_test_split

  data = load_classification("digits", test_fraction=0.25, seed=0)
  raw = sk_load_digits()
  assert data.x_train.shape == (1347, 64) and data.x_test.shape == (450, 64)
  assert data.num_classes == 10 and data.y_train.dtype == np.int32
  # stratified: each class's share of the test split is its share of the data (+-1 example)
  counts = np.bincount(raw.target)
  assert np.all(np.abs(np.bincount(data.y_test, minlength=10) - 0.25 * counts) <= 1)
  # reference: the same split of row indices, standardized with the train rows' statistics
  # in float64 (the loader's are float32: relative round-off up to ~1e-5 on the rare pixels
  # whose std is small, hence rtol 1e-4)
  tr, te = train_test_split(np.arange(len(raw.target)), test_size=0.25, random_state=0,
                            stratify=raw.target)
  mean, std = raw.data[tr].mean(0), raw.data[tr].std(0) + 1e-6
  np.testing.assert_array_equal(data.y_train, raw.target[tr])
  np.testing.assert_allclose(data.x_train, (raw.data[tr] - mean) / std, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(data.x_test, (raw.data[te] - mean) / std, rtol=1e-4, atol=1e-4)
  np.testing.assert_allclose(data.x_train.mean(0), 0.0, atol=1e-5)
