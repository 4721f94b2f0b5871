"""The small DDPM: schedules, forward noising, training on a Gaussian, the sampler."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.models import ddpm
from jaxlab.nn import Net

MEAN, STD = np.array([1.0, -2.0]), np.array([0.5, 0.2])


@pytest.fixture(scope="module")
def trained():
  schedule = ddpm.make_schedule(40, "cosine")
  net = Net.create(ddpm.EpsMLP(2, (64, 64), 32, rngs=nnx.Rngs(0)))
  data = jax.random.normal(jax.random.key(1), (4096, 2)) * STD + MEAN
  net, losses = ddpm.fit(jax.random.key(2), net, schedule, data, steps=400, batch_size=256,
                         learning_rate=3e-3)
  return schedule, net, np.asarray(losses)


def test_schedules():
  lin = ddpm.make_schedule(1000, "linear")
  np.testing.assert_allclose(np.asarray(lin.betas)[[0, -1]], [1e-4, 0.02], rtol=1e-5)
  np.testing.assert_allclose(lin.alphas, 1 - lin.betas)
  np.testing.assert_allclose(lin.alphas_cumprod, np.cumprod(1 - np.asarray(lin.betas, float)),
                             rtol=1e-4)
  cos = ddpm.make_schedule(50, "cosine")
  abar = np.asarray(cos.alphas_cumprod)
  assert cos.num_steps == 50 and np.all(np.diff(abar) < 0)
  assert abar[0] > 0.99 and abar[-1] < 1e-3  # starts near the data, ends near pure noise
  # Nichol & Dhariwal: abar_t = f(t+1) / f(0), f(u) = cos^2((u/T + s) / (1 + s) pi/2)
  f = lambda u: np.cos((u / 50 + 0.008) / 1.008 * np.pi / 2) ** 2
  np.testing.assert_allclose(abar[:40], f(np.arange(1, 41)) / f(0), rtol=1e-4)


def test_schedule_bad_input():
  with pytest.raises(ValueError, match="kind"):
    ddpm.make_schedule(10, "quadratic")
  with pytest.raises(ValueError, match="num_steps"):
    ddpm.make_schedule(0)
  with pytest.raises(ValueError, match="beta_start"):
    ddpm.linear_betas(10, beta_start=0.1, beta_end=0.01)


def test_forward_noising_matches_closed_form():
  schedule = ddpm.make_schedule(100, "linear", beta_start=1e-3, beta_end=0.1)
  x0 = jnp.array([[1.5, -0.5]])
  n = 200_000

  @jax.jit
  def moments(t):
    noise = jax.random.normal(jax.random.key(t), (n, 2))
    xt = ddpm.q_sample(schedule, jnp.broadcast_to(x0, (n, 2)), jnp.full((n,), t), noise)
    return xt.mean(0), xt.var(0)

  for t in (0, 30, 99):
    mean, var = moments(t)
    abar = float(schedule.alphas_cumprod[t])
    np.testing.assert_allclose(mean, np.sqrt(abar) * x0[0], atol=4 * np.sqrt(1 / n) + 1e-4)
    np.testing.assert_allclose(var, [1 - abar] * 2, rtol=0.02, atol=1e-5)


def test_eps_mlp_shapes_and_time_dependence():
  net = Net.create(ddpm.EpsMLP(64, (32,), 16, rngs=nnx.Rngs(0)))  # flattened 8x8 images
  x = jnp.ones((3, 64))
  out0, out1 = jax.jit(jax.vmap(net, (None, 0)))(x, jnp.array([[0, 0, 0], [7, 7, 7]]))
  assert out0.shape == (3, 64)
  assert float(jnp.abs(out0 - out1).max()) > 1e-3
  with pytest.raises(ValueError, match="time_dim"):
    ddpm.EpsMLP(2, (8,), 15, rngs=nnx.Rngs(0))
  with pytest.raises(ValueError, match="hidden_dims"):
    ddpm.EpsMLP(2, (), rngs=nnx.Rngs(0))


def test_per_sample_error_is_mean_squared_eps_error(trained):
  schedule, net, _ = trained
  x0 = jnp.array([[0.3, 0.1], [1.0, -2.0]])
  t, noise = jnp.array([3, 20]), jnp.array([[0.5, -1.0], [2.0, 0.0]])
  got, pred = jax.jit(lambda: (ddpm.per_sample_eps_error(net, schedule, x0, t, noise),
                               net(ddpm.q_sample(schedule, x0, t, noise), t)))()
  np.testing.assert_allclose(got, np.mean((np.asarray(pred) - np.asarray(noise)) ** 2, -1),
                             rtol=1e-6)


def test_trained_ddpm_recovers_the_gaussian(trained):
  schedule, net, losses = trained
  assert losses[-50:].mean() < 0.7 * losses[:10].mean()
  x = np.asarray(ddpm.sample(jax.random.key(3), net, schedule, (4000, 2)))
  np.testing.assert_allclose(x.mean(0), MEAN, atol=0.15)
  np.testing.assert_allclose(x.std(0), STD, rtol=0.25)


def test_sampler_deterministic_per_key(trained):
  schedule, net, _ = trained
  a = ddpm.sample(jax.random.key(5), net, schedule, (4000, 2))
  b = ddpm.sample(jax.random.key(5), net, schedule, (4000, 2))
  c = ddpm.sample(jax.random.key(6), net, schedule, (4000, 2))
  assert a.shape == (4000, 2) and np.all(np.isfinite(a))
  np.testing.assert_array_equal(a, b)
  assert float(jnp.abs(a - c).mean()) > 0.1
  # other parameters through `params=`: an untrained net gives different samples
  other = Net.create(ddpm.EpsMLP(2, (64, 64), 32, rngs=nnx.Rngs(9))).params
  d = ddpm.sample(jax.random.key(5), net, schedule, (4000, 2), params=other)
  assert float(jnp.abs(a - d).mean()) > 0.1


def test_sample_and_fit_bad_input(trained):
  schedule, net, _ = trained
  with pytest.raises(ValueError, match="shape"):
    ddpm.sample(jax.random.key(0), net, schedule, [10, 2])
  with pytest.raises(ValueError, match="steps"):
    ddpm.fit(jax.random.key(0), net, schedule, jnp.zeros((8, 2)), steps=0, batch_size=4)
  with pytest.raises(ValueError, match="data"):
    ddpm.fit(jax.random.key(0), net, schedule, jnp.zeros(8), steps=1, batch_size=4)


def test_sampler_hook_and_cond(trained):
  """A hook returning the network's eps is the plain sampler bit for bit; a hook that edits
  the latent changes the samples; ``cond`` is passed as the network's third argument."""
  schedule, net, _ = trained
  plain = ddpm.sample(jax.random.key(5), net, schedule, (64, 2))

  def identity(carry, i, x, t, evaluate):
    return x, evaluate(x), carry + i + t  # i + t = T - 1 at every step

  x, c = ddpm.sample(jax.random.key(5), net, schedule, (64, 2), hook=identity,
                     hook_carry=jnp.zeros((), jnp.int32))
  np.testing.assert_array_equal(x, plain)
  assert int(c) == 40 * 39
  shift = lambda carry, i, x, t, evaluate: (x + 1.0, evaluate(x + 1.0), carry)
  y, _ = ddpm.sample(jax.random.key(5), net, schedule, (64, 2), hook=shift, hook_carry=0)
  assert float(jnp.abs(y - plain).mean()) > 0.1

  class CondEps(nnx.Module):  # net(x, t, cond): an EpsMLP plus a conditioning offset
    def __init__(self, rngs):
      self.eps = ddpm.EpsMLP(2, (16,), 8, rngs=rngs)

    def __call__(self, x, t, cond):
      return self.eps(x, t) + cond

  cond_net = Net.create(CondEps(nnx.Rngs(0)))
  inner = Net.create(ddpm.EpsMLP(2, (16,), 8, rngs=nnx.Rngs(0)))
  z = ddpm.sample(jax.random.key(5), cond_net, schedule, (64, 2), cond=jnp.zeros((64, 2)))
  np.testing.assert_allclose(z, ddpm.sample(jax.random.key(5), inner, schedule, (64, 2)),
                             rtol=1e-6, atol=1e-6)
  x0, t, noise = jnp.zeros((4, 2)), jnp.arange(4), jnp.ones((4, 2))
  ref = jnp.mean((inner(ddpm.q_sample(schedule, x0, t, noise), t) + 0.5 - noise) ** 2, -1)
  np.testing.assert_allclose(
      ddpm.per_sample_eps_error(cond_net, schedule, x0, t, noise, cond=jnp.full((4, 2), 0.5)),
      ref, rtol=1e-6)
  with pytest.raises(ValueError, match="hook_carry"):
    ddpm.sample(jax.random.key(5), net, schedule, (4, 2), hook_carry=0)
  with pytest.raises(TypeError, match="hook"):
    ddpm.sample(jax.random.key(5), net, schedule, (4, 2), hook=3)
