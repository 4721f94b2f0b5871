"""Flow utilities against closed-form densities and maps."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from scipy.stats import multivariate_normal

from jaxlab.nn import Net, flows
from jaxlab.rl.networks import VelocityField

SIGMA = 0.5
W = jnp.array([[0.5, -1.0], [0.3, 0.8], [0.0, 0.2]])  # obs (3) -> mean (2)


def affine_velocity(obs, x, t):
  """Straight flow pushing N(0, I) to N(obs @ W, SIGMA^2 I) through z -> mu + SIGMA z."""
  mu = obs @ W
  return mu + (SIGMA - 1.0) * (x - t * mu) / (1.0 + t * (SIGMA - 1.0))


def _obs(n=16, seed=0):
  return jax.random.normal(jax.random.key(seed), (n, 3))


def test_log_prob_matches_closed_form_density():
  obs = _obs()
  actions = obs @ W + SIGMA * jax.random.normal(jax.random.key(1), (16, 2))
  got = jax.jit(lambda o, a: flows.log_prob(affine_velocity, o, a, num_steps=400))(obs, actions)
  want = [multivariate_normal(np.asarray(m), SIGMA**2 * np.eye(2)).logpdf(np.asarray(a))
          for m, a in zip(obs @ W, actions, strict=True)]
  np.testing.assert_allclose(got, want, atol=2e-2)
  # Few steps are a coarse but finite approximation, and the divergence term matters:
  coarse = flows.log_prob(affine_velocity, obs, actions, num_steps=10)
  assert np.max(np.abs(coarse - np.asarray(want))) < 0.5
  assert abs(2 * math.log(SIGMA)) > 1.0  # the divergence integral, -A log(sigma), is not small


def test_euler_sample_matches_the_exact_map():
  obs, z = _obs(), jax.random.normal(jax.random.key(2), (16, 2))
  x = flows.euler_sample(affine_velocity, obs, z, num_steps=400)
  np.testing.assert_allclose(x, obs @ W + SIGMA * z, atol=1e-2)


def _random_field(seed=0):
  net = Net.create(VelocityField(3, 2, [16, 16], rngs=nnx.Rngs(seed)))
  return lambda o, x, t: net(o, x, t)


def test_exact_divergence_is_the_jacobian_trace():
  field, obs = _random_field(), _obs(5)
  x, t = jax.random.normal(jax.random.key(3), (5, 2)), jnp.full((5, 1), 0.3)
  got = flows.divergence_exact(field, obs, x, t)
  jac = jax.vmap(lambda o, xi: jax.jacfwd(lambda y: field(o[None], y[None], t[:1])[0])(xi))(obs, x)
  np.testing.assert_allclose(got, jnp.trace(jac, axis1=1, axis2=2), rtol=1e-5, atol=1e-6)


def test_hutchinson_is_unbiased_for_the_exact_divergence():
  field, obs = _random_field(1), _obs(4)
  x, t = jax.random.normal(jax.random.key(4), (4, 2)), jnp.full((4, 1), 0.7)
  exact = flows.divergence_exact(field, obs, x, t)
  keys = jax.random.split(jax.random.key(5), 2000)
  est = jax.vmap(lambda k: flows.divergence_hutchinson(field, obs, x, t, k, num_probes=1))(keys)
  stderr = est.std(0) / math.sqrt(len(keys))
  assert np.all(np.abs(est.mean(0) - exact) < 4 * stderr + 1e-6)
  lp_exact = flows.log_prob(field, obs, x)
  lp_hutch = jax.vmap(lambda k: flows.log_prob(field, obs, x, divergence="hutchinson", key=k,
                                               num_probes=4))(keys[:500])
  np.testing.assert_allclose(lp_hutch.mean(0), lp_exact, atol=0.05)


def test_flow_matching_loss_by_hand():
  obs = _obs(8)
  actions = jax.random.normal(jax.random.key(6), (8, 2))
  key = jax.random.key(7)
  zero = lambda o, x, t: jnp.zeros_like(x)
  key_t, key_z = jax.random.split(key)
  z = jax.random.normal(key_z, actions.shape)
  np.testing.assert_allclose(flows.flow_matching_loss(zero, obs, actions, key),
                             jnp.mean((actions - z) ** 2), rtol=1e-6)
  # A field that knows the pairing (v = a - z at x_t) has zero loss.
  t = jax.random.uniform(key_t, (8, 1))
  oracle = lambda o, x, tt: (x - (1 - t) * z - t * actions) + actions - z
  assert float(flows.flow_matching_loss(oracle, obs, actions, key)) < 1e-10


def test_bad_arguments():
  obs, a = _obs(2), jnp.zeros((2, 2))
  with pytest.raises(ValueError, match="divergence"):
    flows.log_prob(affine_velocity, obs, a, divergence="trace")
  with pytest.raises(ValueError, match="key"):
    flows.log_prob(affine_velocity, obs, a, divergence="hutchinson")
  with pytest.raises(ValueError, match="num_steps"):
    flows.euler_sample(affine_velocity, obs, a, num_steps=0)
  with pytest.raises(ValueError, match="num_probes"):
    flows.log_prob(affine_velocity, obs, a, divergence="hutchinson", key=jax.random.key(0),
                   num_probes=0)


def test_gaussian_and_rademacher_probes_are_both_unbiased_and_differ_as_the_theory_says():
  # A diagonal linear field v(x) = x * d: div = sum(d). A Rademacher probe gives
  # e^T diag(d) e = sum(d) exactly (zero variance); a Gaussian one has variance 2 sum(d^2).
  d = jnp.array([0.5, -2.0])
  field = lambda o, x, t: x * d
  obs, x, t = _obs(3), jnp.ones((3, 2)), jnp.full((3, 1), 0.5)
  keys = jax.random.split(jax.random.key(8), 4000)
  est = {p: jax.vmap(lambda k, p=p: flows.divergence_hutchinson(field, obs, x, t, k, 1, p))(keys)
         for p in flows.PROBES}
  np.testing.assert_allclose(est["rademacher"], float(d.sum()), rtol=1e-6)
  g = est["gaussian"][:, 0]
  assert abs(float(g.mean()) - float(d.sum())) < 4 * float(g.std()) / math.sqrt(len(keys))
  np.testing.assert_allclose(float(g.var()), 2 * float(jnp.sum(d ** 2)), rtol=0.1)
  # log_prob's "hutchinson_gaussian" divergence is the Gaussian estimator: exact on average
  lp = jax.vmap(lambda k: flows.log_prob(field, obs, x, divergence="hutchinson_gaussian",
                                         key=k))(keys[:200])
  np.testing.assert_allclose(lp.mean(0), flows.log_prob(field, obs, x), atol=0.1)
  with pytest.raises(ValueError, match="probe"):
    flows.divergence_hutchinson(field, obs, x, t, keys[0], 1, "uniform")


def test_euler_sample_hook_is_additive():
  """No hook: the original scan, bit for bit; a hook returning evaluate(): the same again."""
  field, obs = _random_field(), _obs(6)
  z = jax.random.normal(jax.random.key(4), (6, 2))

  def original(velocity_fn, obs, noise, num_steps):  # the sampler before the hook existed
    def step(x, k):
      t = jnp.full((x.shape[0], 1), k / num_steps, x.dtype)
      return x + velocity_fn(obs, x, t) / num_steps, None
    return jax.lax.scan(step, noise, jnp.arange(num_steps))[0]

  plain = jax.jit(lambda o, n: flows.euler_sample(field, o, n, 7))(obs, z)
  np.testing.assert_array_equal(plain, jax.jit(lambda o, n: original(field, o, n, 7))(obs, z))

  def count(carry, k, x, t, evaluate):
    return evaluate(), carry + 1

  hooked, calls = jax.jit(lambda o, n: flows.euler_sample(
      field, o, n, 7, hook=count, hook_carry=jnp.int32(0)))(obs, z)
  np.testing.assert_array_equal(hooked, plain)
  assert int(calls) == 7

  def cache(carry, k, x, t, evaluate):  # fixed velocity caching: reuse v every other step
    v = jax.lax.cond(k % 2 == 0, evaluate, lambda: carry)
    return v, v

  cached, _ = flows.euler_sample(field, obs, z, 4, hook=cache, hook_carry=jnp.zeros_like(z))
  x, t = z, lambda k: jnp.full((6, 1), k / 4)
  v0 = field(obs, x, t(0))
  x = x + v0 / 4 + v0 / 4
  v2 = field(obs, x, t(2))
  np.testing.assert_allclose(cached, x + v2 / 4 + v2 / 4, rtol=1e-6, atol=1e-6)
  with pytest.raises(ValueError, match="hook_carry was given without a hook"):
    flows.euler_sample(field, obs, z, 4, hook_carry=0)
  with pytest.raises(TypeError, match="hook must be callable"):
    flows.euler_sample(field, obs, z, 4, hook=3)
