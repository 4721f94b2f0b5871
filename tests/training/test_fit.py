"""The shared fit loop against a hand-written Python loop of optax steps.

Tolerance. The scan and the Python loop run the same operations in the same order, but
as different XLA programs (one fused loop body vs op-by-op dispatch), so float32 results
may differ by round-off. Adam's update has magnitude at most about ``lr`` per coordinate
and one step rounds it (and the sum ``w + u``) with relative error of a few ``eps``; the
errors add up at most linearly over ``T`` steps, so ``|w_scan - w_python| <= T * eps *
(max|w| + 10 * lr)`` (``10``: generous count of rounded operations per update). Adam's
normalization keeps gradient round-off from growing beyond that (it is divided out).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.training import FitResult, fit, minibatch_sampler

EPS = float(jnp.finfo(jnp.float32).eps)
LR, T = 1e-2, 24


def _problem():
  k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
  x = jax.random.normal(k1, (40, 3))
  y = x @ jax.random.normal(k2, (3, 2)) + 0.1 * jax.random.normal(k3, (40, 2))
  return x, y


def _loss(w, batch, key):
  """Squared error on the batch plus a key-dependent term, so the loss key matters."""
  x, y = batch
  jitter = 1e-3 * jnp.sum(jax.random.normal(key, w.shape) * w)
  return jnp.mean((x @ w - y) ** 2) + jitter


def _tol(w):
  return T * EPS * (float(np.max(np.abs(w))) + 10 * LR)


def _python_loop(w, key, data, batch_size, steps=T, evals_every=None):
  """The documented step by hand: split (next, batch, loss) keys, sample, Adam, apply."""
  opt = optax.adam(LR)
  state, evals = opt.init(w), []
  n = data[0].shape[0]
  for t in range(steps):
    key, k_batch, k_loss = jax.random.split(key, 3)
    idx = jax.random.randint(k_batch, (batch_size,), 0, n)
    batch = (data[0][idx], data[1][idx])
    grads = jax.grad(_loss)(w, batch, k_loss)
    updates, state = opt.update(grads, state, w)
    w = optax.apply_updates(w, updates)
    if evals_every and (t + 1) % evals_every == 0:
      evals.append(float(jnp.mean((data[0] @ w - data[1]) ** 2)))
  return w, np.asarray(evals)


def test_sampled_minibatches_match_a_python_loop_with_evals():
  data = _problem()
  w0 = jnp.zeros((3, 2))
  full_loss = lambda w: jnp.mean((data[0] @ w - data[1]) ** 2)
  run = jax.jit(lambda w, k: fit(_loss, optax.adam(LR), w, k, num_steps=T,
                                 sample=minibatch_sampler(data, 8), eval_fn=full_loss,
                                 num_evals=4))
  result = run(w0, jax.random.key(1))
  assert isinstance(result, FitResult)
  w_ref, evals_ref = _python_loop(w0, jax.random.key(1), data, 8, evals_every=T // 4)
  tol = _tol(w_ref)
  np.testing.assert_allclose(result.state.params, w_ref, rtol=0, atol=tol)
  assert float(jnp.max(jnp.abs(result.state.params - w0))) > 0.1  # it trained
  # evaluations after steps 6, 12, 18, 24; the loss is smooth in w, so its error is
  # |grad| * |dw| with |grad| <= about 10 here
  np.testing.assert_allclose(result.evals, evals_ref, rtol=0, atol=10 * tol)
  assert np.all(np.diff(result.evals) < 0)
  assert int(result.state.step) == T and result.losses.shape == (T,)
  assert result.metrics.aux is None and result.metrics.grad_norm is None


def test_batches_key_contract_aux_and_grad_norm():
  """Scanned per-step batches; the loss key is split(key)[1]; losses come before updates."""
  data = _problem()
  batches = (data[0].reshape(5, 8, 3), data[1].reshape(5, 8, 2))
  w0 = 0.1 * jnp.ones((3, 2))
  aux_loss = lambda w, b, k: (_loss(w, b, k), {"key": jax.random.key_data(k)})
  result = jax.jit(lambda w, k: fit(aux_loss, optax.sgd(LR), w, k, batches=batches,
                                    has_aux=True, grad_norm=True))(w0, jax.random.key(2))
  key, w = jax.random.key(2), w0
  for t in range(5):
    key, k_loss = jax.random.split(key)
    np.testing.assert_array_equal(result.metrics.aux["key"][t], jax.random.key_data(k_loss))
    batch = (batches[0][t], batches[1][t])
    loss, grads = jax.value_and_grad(_loss)(w, batch, k_loss)
    np.testing.assert_allclose(result.losses[t], loss, rtol=1e-5)
    np.testing.assert_allclose(result.metrics.grad_norm[t], jnp.linalg.norm(grads), rtol=1e-5)
    w = w - LR * grads
  np.testing.assert_allclose(result.state.params, w, rtol=0, atol=_tol(w))


def test_sampler_key_is_the_middle_of_a_three_way_split():
  data = (jnp.arange(10.0)[:, None],)
  seen = lambda w, b, k: (jnp.sum(w * b[0]), b[0][:, 0])
  result = fit(seen, optax.sgd(0.0), jnp.ones(()), jax.random.key(3), num_steps=3,
               sample=minibatch_sampler(data, 4), has_aux=True)
  key = jax.random.key(3)
  for t in range(3):
    key, k_batch, _ = jax.random.split(key, 3)
    np.testing.assert_array_equal(result.metrics.aux[t],
                                  jax.random.randint(k_batch, (4,), 0, 10).astype(jnp.float32))


def test_without_a_key_the_loss_gets_none_and_batches_split_over_evals():
  got = []
  loss = lambda w, b, k: (got.append(k), jnp.sum((w - b) ** 2))[1]
  batches = jnp.arange(12.0).reshape(6, 2)
  result = fit(loss, optax.sgd(0.5), jnp.zeros(2), None, batches=batches, eval_fn=lambda w: w,
               num_evals=3)
  assert got == [None] and result.state.key is None  # traced once, with no key
  # sgd(0.5) on (w - b)^2 jumps to w = b: after steps 2, 4, 6 the params are batches 1, 3, 5
  np.testing.assert_allclose(result.evals, batches[1::2])
  np.testing.assert_allclose(result.losses[1:], np.sum((batches[1:] - batches[:-1]) ** 2, -1))


def test_compiles_once_for_calls_of_the_same_shapes():
  data = _problem()

  @jax.jit
  @chex.assert_max_traces(n=1)
  def run(w, key, x, y):
    return fit(_loss, optax.adam(LR), w, key, num_steps=10,
               sample=minibatch_sampler((x, y), 8)).state.params

  chex.clear_trace_counter()
  a = run(jnp.zeros((3, 2)), jax.random.key(0), *data)
  b = run(jnp.ones((3, 2)), jax.random.key(1), data[0] + 1.0, data[1])
  assert not np.allclose(a, b)
  with pytest.raises(AssertionError, match="traced > 1 times"):
    run(jnp.zeros((4, 2)), jax.random.key(0), *data)  # a new shape: a second trace


def test_vmap_over_seeds_matches_each_seed_alone():
  data = _problem()
  one = lambda k: fit(_loss, optax.adam(LR), jnp.zeros((3, 2)), k, num_steps=T,
                      sample=minibatch_sampler(data, 8)).state.params
  keys = jax.random.split(jax.random.key(4), 3)
  many = jax.jit(jax.vmap(one))(keys)
  for i in range(3):
    alone = jax.jit(one)(keys[i])
    # batched vs unbatched programs: the same round-off bound as against the Python loop
    np.testing.assert_allclose(many[i], alone, rtol=0, atol=_tol(alone))
  assert not np.allclose(many[0], many[1])


def test_bad_arguments():
  data = _problem()
  loss = lambda w, b, k: jnp.sum(w)
  opt = optax.sgd(0.1)
  w = jnp.zeros(2)
  with pytest.raises(ValueError, match="not both"):
    fit(loss, opt, w, jax.random.key(0), batches=jnp.ones((3, 2)),
        sample=minibatch_sampler(data, 2))
  with pytest.raises(ValueError, match="sample needs a key"):
    fit(loss, opt, w, None, num_steps=3, sample=minibatch_sampler(data, 2))
  with pytest.raises(ValueError, match="num_steps=4 but batches have 3"):
    fit(loss, opt, w, None, num_steps=4, batches=jnp.ones((3, 2)))
  with pytest.raises(ValueError, match="num_steps must be a positive int"):
    fit(loss, opt, w, jax.random.key(0))
  with pytest.raises(ValueError, match="num_evals"):
    fit(loss, opt, w, jax.random.key(0), num_steps=10, eval_fn=jnp.sum, num_evals=3)
  with pytest.raises(ValueError, match="eval_fn"):
    fit(loss, opt, w, jax.random.key(0), num_steps=10, num_evals=2)
  with pytest.raises(ValueError, match="batch_size"):
    minibatch_sampler(data, 0)
  with pytest.raises(ValueError, match="leading axis"):
    minibatch_sampler((jnp.ones(3), jnp.ones(4)), 2)
