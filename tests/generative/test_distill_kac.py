"""DistillKac: the Kac marginal vs simulation, velocity limits, AB-2, CFG, distillation loss."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp

from jaxlab.generative import distill_kac as dk

A_, C_ = 9.0, 3.0


@pytest.mark.parametrize("s", [0.05, 0.3, 1.0])
def test_density_plus_atoms_has_mass_one(s):
  y = np.linspace(-C_ * s, C_ * s, 400_001)
  mass = np.trapezoid(np.asarray(dk.kac_density(y, s, a=A_, c=C_)), y)
  np.testing.assert_allclose(mass, 1.0 - np.exp(-A_ * s), atol=2e-6)
  np.testing.assert_allclose(mass + float(dk.kac_atom_mass(s, a=A_)), 1.0, atol=2e-6)
  assert float(dk.kac_density(C_ * s * 1.01, s)) == 0.0


def test_density_matches_scipy_bessel_form():
  s, y = 0.4, np.array([-1.0, -0.3, 0.0, 0.5, 1.1])
  r = np.sqrt(C_**2 * s**2 - y**2)
  z = A_ * r / C_
  ref = np.exp(-A_ * s) / (2 * C_) * (A_ * sp.i0(z) + A_ * C_ * s * sp.i1(z) / r)
  np.testing.assert_allclose(np.asarray(dk.kac_density(y, s)), ref, rtol=1e-5)


@pytest.mark.parametrize("s", [0.1, 0.3])
def test_simulation_matches_the_marginal(s):
  """Histogram of 200k exact draws vs the density; atoms at +-cs with mass e^{-as}."""
  n = 200_000
  x = np.asarray(dk.sample_kac(jax.random.key(1), s, (n,), a=A_, c=C_))
  cs = C_ * s
  assert np.all(np.abs(x) <= cs * (1 + 1e-5))
  on_atom = np.abs(np.abs(x) - cs) < 1e-5 * cs
  p_atom = np.exp(-A_ * s)
  # binomial count: 5 standard deviations
  assert abs(on_atom.mean() - p_atom) <= 5 * np.sqrt(p_atom * (1 - p_atom) / n)
  # the two atoms split evenly (random initial sign)
  k = on_atom.sum()
  assert abs((x[on_atom] > 0).sum() - k / 2) <= 5 * np.sqrt(k / 4)
  edges = np.linspace(-cs, cs, 41)
  counts, _ = np.histogram(x[~on_atom], bins=edges)
  fine = np.linspace(-cs, cs, 40 * 2000 + 1)
  dens = np.asarray(dk.kac_density(fine, s))
  cum = np.concatenate([[0.0], np.cumsum((dens[1:] + dens[:-1]) / 2 * np.diff(fine))])
  expected = n * np.diff(cum[::2000])
  # Poisson counts per bin: each within 5 sigma (40 bins; a false alarm has p < 1e-4)
  np.testing.assert_array_less(np.abs(counts - expected), 5 * np.sqrt(expected) + 1)


def test_simulation_per_sample_times_and_determinism():
  s = jnp.array([[0.0], [0.2], [0.5]])
  x = dk.sample_kac(jax.random.key(3), s, (3, 1000))
  assert np.all(np.asarray(x[0]) == 0.0)
  assert np.all(np.abs(np.asarray(x[1:])) <= C_ * np.asarray(s[1:]) + 1e-6)
  np.testing.assert_array_equal(x, dk.sample_kac(jax.random.key(3), s, (3, 1000)))


def test_velocity_bessel_ratio_matches_scipy():
  s, y = 0.5, np.array([-1.2, -0.4, 0.1, 0.9, 1.4])
  r = np.sqrt(C_**2 * s**2 - y**2)
  z = A_ * r / C_
  ref = y / (s + (r / C_) * sp.i0(z) / sp.i1(z))
  np.testing.assert_allclose(np.asarray(dk.kac_velocity(y, s)), ref, rtol=1e-5)


def test_velocity_small_argument_limit():
  # z < SMALL_Z: the denominator is exactly s + 2/a
  s, y = 1e-4, np.array([-1e-4, 0.0, 5e-5])
  np.testing.assert_allclose(np.asarray(dk.kac_velocity(y, s)), y / (s + 2 / A_), rtol=1e-5)
  # just above the threshold: I0/I1 = 2/z + z/4 + O(z^3), so the term is 2/a + r z / (4c)
  s = 0.005
  y = np.array([0.0, 0.004, -0.01])
  r = np.sqrt(C_**2 * s**2 - y**2)
  z = A_ * r / C_
  assert np.all(z > dk.SMALL_Z)
  np.testing.assert_allclose(np.asarray(dk.kac_velocity(y, s)),
                             y / (s + 2 / A_ + r * z / (4 * C_)), rtol=1e-4)


def test_velocity_on_and_near_the_light_cone():
  s = 0.3
  cs = C_ * s
  v = np.asarray(dk.kac_velocity(np.array([cs, -cs, cs * (1 - 1e-5), 0.0]), s))
  np.testing.assert_array_equal(v[:3], [C_, -C_, C_])
  assert v[3] == 0.0
  assert float(dk.kac_velocity(0.0, 0.0)) == 0.0
  grid = np.linspace(-cs, cs, 10_001)
  assert np.all(np.abs(np.asarray(dk.kac_velocity(grid, s))) <= C_)


def test_target_velocity_is_f_prime_x0_plus_v():
  x0 = jnp.array([[0.5, -1.0]])
  y = jnp.array([[0.2, -0.9]])
  t = jnp.array([[0.3]])
  u = dk.target_velocity(x0, y, t, T=2.0)
  np.testing.assert_allclose(u, -x0 / 2.0 + dk.kac_velocity(y, t), rtol=1e-6)
  np.testing.assert_allclose(u[0, 1], 0.5 - 3.0, rtol=1e-6)   # -0.9 is on the cone


def field(obs, x, t):
  """A field that depends on x, t and obs: hand loops can reproduce it."""
  return -0.7 * x + 2.0 * t + obs[:, :1]


def test_euler_and_ab2_match_hand_loops():
  obs = jnp.array([[0.5], [-1.0]])
  x_T = jnp.array([[1.0, -2.0, 0.5], [0.3, 0.0, -1.0]])
  n, T = 7, 1.5
  h = T / n
  for method in ("euler", "ab2"):
    x, speed = dk.kac_sample(field, obs, x_T, n, T=T, method=method)
    ref = np.asarray(x_T, np.float64)
    prev, speeds = None, []
    for k in range(n):
      t = T * (1 - k / n)
      u = -0.7 * ref + 2.0 * t + np.asarray(obs[:, :1])
      speeds.append(np.abs(u).max())
      v = u if (method == "euler" or prev is None) else 1.5 * u - 0.5 * prev
      ref = ref - h * v
      prev = u
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(speed, speeds, rtol=1e-5)


def test_cfg_formula():
  obs = jnp.array([[1.0, 0.0], [0.0, 2.0]])
  x = jnp.ones((2, 3))
  t = jnp.full((2, 1), 0.5)
  cond = lambda o, x, t: x * t + jnp.sum(o * jnp.array([3.0, 5.0]), -1, keepdims=True)  # noqa: E731
  w = 0.8
  got = dk.cfg_velocity(cond, w)(obs, x, t)
  # u(0) = x t = 0.5; u(obs) = 0.5 + (3, 10)
  want = (1 + w) * (0.5 + np.array([[3.0], [10.0]])) - w * 0.5
  np.testing.assert_allclose(got, np.broadcast_to(want, (2, 3)), rtol=1e-6)
  np.testing.assert_allclose(dk.cfg_velocity(cond, 0.0)(obs, x, t), cond(obs, x, t))


def test_distillation_loss_hand_cases():
  key = jax.random.key(0)
  x0 = jax.random.uniform(key, (16, 4), minval=-1, maxval=1)
  obs = jnp.zeros((16, 0))
  # constant fields b, b': both ends move by Delta b: loss Delta^2 (b - b')^2
  const = lambda b: (lambda o, x, t: jnp.full_like(x, b))  # noqa: E731
  loss = dk.distill_loss(const(1.0), const(3.0), obs, x0, key, student_steps=4,
                         teacher_substeps=5)
  np.testing.assert_allclose(loss, 0.25**2 * 2.0**2, rtol=1e-5)
  # u = t: N teacher substeps of delta remove Delta t_k - delta^2 N (N - 1) / 2, the student
  # Delta t_k: the gap Delta^2 (N - 1) / (2N) for every t_k (M = 2, N = 5: 0.1)
  lin = lambda o, x, t: jnp.broadcast_to(t, x.shape)  # noqa: E731
  loss = dk.distill_loss(lin, lin, obs, x0, key, student_steps=2, teacher_substeps=5)
  np.testing.assert_allclose(loss, 0.1**2, rtol=1e-4)
  # a student equal to a 1-substep teacher: zero
  loss = dk.distill_loss(field, field, jnp.ones((16, 1)), x0, key, student_steps=4,
                         teacher_substeps=1)
  assert float(loss) == 0.0


def test_kac_loss_is_zero_for_the_exact_target_field():
  """A field that knows x0 and K: the loss vanishes (the target is what is regressed)."""
  key = jax.random.key(2)
  x0 = jax.random.uniform(key, (8, 5), minval=-1, maxval=1)
  k_t, k_k, _ = jax.random.split(key, 3)
  t = jax.random.uniform(k_t, (8, 1), minval=0.0, maxval=1.0)
  xt, y = dk.forward_process(k_k, x0, t)
  exact = lambda o, x, tt: dk.target_velocity(x0, x - (1 - tt) * x0, tt)  # noqa: E731
  assert float(dk.kac_loss(exact, jnp.zeros((8, 0)), x0, key)) < 1e-10
  np.testing.assert_allclose(xt - (1 - t) * x0, y, atol=1e-6)


def test_bad_input_named_errors():
  key = jax.random.key(0)
  with pytest.raises(ValueError, match="^a must"):
    dk.sample_kac(key, 0.5, (3,), a=-1.0)
  with pytest.raises(ValueError, match="^c must"):
    dk.kac_density(0.1, 0.5, c=0.0)
  with pytest.raises(TypeError, match="shape"):
    dk.sample_kac(key, 0.5, [3])
  with pytest.raises(ValueError, match="^max_flips"):
    dk.sample_kac(key, 0.5, (3,), max_flips=0)
  with pytest.raises(ValueError, match="^s must"):
    dk.sample_kac(key, -0.1, (3,))
  x = jnp.zeros((2, 3))
  with pytest.raises(ValueError, match="^method must"):
    dk.kac_sample(field, jnp.zeros((2, 1)), x, 4, method="rk4")
  with pytest.raises(ValueError, match="^num_steps"):
    dk.kac_sample(field, jnp.zeros((2, 1)), x, 0)
  with pytest.raises(ValueError, match="^obs must"):
    dk.kac_sample(field, jnp.zeros((3, 1)), x, 4)
  with pytest.raises(ValueError, match="^x0 must"):
    dk.kac_loss(field, jnp.zeros((2, 1)), jnp.zeros(3), key)
  with pytest.raises(ValueError, match="^label_dropout"):
    dk.kac_loss(field, jnp.zeros((2, 1)), x, key, label_dropout=2.0)
  with pytest.raises(ValueError, match="^student_steps"):
    dk.distill_loss(field, field, jnp.zeros((2, 1)), x, key, student_steps=0,
                    teacher_substeps=2)
  with pytest.raises(TypeError, match="velocity_fn"):
    dk.cfg_velocity(None, 1.0)
  with pytest.raises(ValueError, match="^eps must"):
    dk.kac_velocity(0.1, 0.5, eps=2.0)
