"""The scanned training loop and the MLP (the test problems' data: tests/data)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.data.optim_problems import load_classification, make_least_squares
from jaxlab.optim.problems import mlp_functional, mlp_net, train


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
  # Not one XLA program (a jitted scan vs 20 eager steps): the gradient's 32-row sums may
  # run in another order, so compare within float32 round-off grown over the steps, not
  # bit for bit. Each Adam step moves w by lr * m_hat / (sqrt(v_hat) + eps), at most ~lr,
  # with a relative round-off of a few eps32 (the ratio, the reduction order) that later
  # steps carry forward: |w - w_ref| <= steps * lr * eps32 * 10 = 2.4e-7 (an AMD EPYC
  # machine measured 5e-8, this one 3e-8; one step more or less moves w by up to lr = 1e-2).
  eps32 = float(jnp.finfo(jnp.float32).eps)
  np.testing.assert_allclose(w, w_ref, rtol=0, atol=20 * 1e-2 * eps32 * 10)
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
