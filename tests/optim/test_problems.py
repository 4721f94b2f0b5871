"""Optimizer test problems, the scanned training loop and the data loaders."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import tensorflow_datasets as tfds

from jaxlab.optim.problems import (
    load_classification,
    make_least_squares,
    mlp_functional,
    mlp_net,
    rosenbrock,
    train,
)


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


def test_train_records_evals_and_matches_python_loop():
  p = make_least_squares(jax.random.key(1), num_rows=32, dim_in=4, dim_out=2)
  opt = optax.adam(1e-2)
  w0 = jnp.zeros((4, 2))
  w, evals = jax.jit(lambda w: train(opt, lambda w, k: p.loss(w), w, jax.random.key(0), 20,
                                     num_evals=4))(w0)
  assert evals.shape == (4,) and np.all(np.diff(evals) < 0)
  s, w_ref = opt.init(w0), w0
  for _ in range(20):
    u, s = opt.update(jax.grad(p.loss)(w_ref), s)
    w_ref = optax.apply_updates(w_ref, u)
  # The scan and this loop are different XLA programs: float32 round-off of a few eps per
  # Adam update (size <= lr) and per sum w + u, adding up over the 20 steps.
  eps = float(jnp.finfo(jnp.float32).eps)
  np.testing.assert_allclose(w, w_ref, rtol=0,
                             atol=20 * eps * (float(jnp.max(jnp.abs(w_ref))) + 10 * 1e-2))
  with pytest.raises(ValueError, match="num_evals"):
    train(opt, lambda w, k: p.loss(w), w0, jax.random.key(0), 10, num_evals=3)


def test_mlp_functional_and_digits():
  data = load_classification("digits")
  assert data.x_train.shape[1] == 64 and data.num_classes == 10
  assert abs(float(data.x_train.mean())) < 1e-3
  net = mlp_net((64, 32, 10), 0)
  x = jnp.asarray(data.x_test[:5])
  assert net(x).shape == (5, 10)
  apply, params = mlp_functional((64, 32, 10), 0)  # the older closure form: the same network
  np.testing.assert_array_equal(apply(params, x), net(x))
  with pytest.raises(ValueError, match="name"):
    load_classification("imagenet")


def test_tfds_data_source_path_with_mock_data():
  with tfds.testing.mock_data(num_examples=12):
    data = load_classification("mnist")
  assert data.x_train.shape == (12, 784) and data.x_test.shape == (12, 784)
  assert data.y_train.dtype == np.int32
