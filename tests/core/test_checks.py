import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import checks


def test_check_range_accepts_and_rejects_with_the_name_and_interval():
  checks.check_range(0.5, "b1", lo=0.0, hi=1.0, hi_open=True)
  checks.check_range(0.0, "b1", lo=0.0, hi=1.0, hi_open=True)
  with pytest.raises(ValueError, match=r"b1 must be in \[0.0, 1.0\), got 1.0"):
    checks.check_range(1.0, "b1", lo=0.0, hi=1.0, hi_open=True)
  with pytest.raises(ValueError, match=r"beta .*\(0.0, inf\)"):
    checks.check_range(0.0, "beta", lo=0.0, lo_open=True)
  with pytest.raises(ValueError, match="lr must be finite and in"):
    checks.check_range(float("nan"), "lr")
  with pytest.raises(ValueError, match="got -1.0"):
    checks.check_range(np.array([1.0, -1.0]), "rates", lo=0.0, scalar=False)
  with pytest.raises(ValueError, match="scalar"):
    checks.check_range(np.ones(2), "eps", lo=0.0)
  with pytest.raises(TypeError, match="eps"):
    checks.check_range("small", "eps")
  with pytest.raises(TypeError, match="eps"):
    checks.check_range(True, "eps")


def test_traced_values_are_not_inspected():
  def f(x):
    assert checks.check_range(x, "x", lo=0.0) is None
    assert checks.concrete(x, "x") is None and checks.is_traced(x)
    return x

  jax.jit(f)(-1.0)  # out of range, but traced: no error
  jax.vmap(f)(jnp.array([-1.0, 2.0]))
  with pytest.raises(ValueError, match="scalar"):
    jax.jit(lambda x: checks.concrete(x, "x", scalar=True))(jnp.ones(3))


def test_check_int():
  assert checks.check_int(3, "n", lo=1) == 3
  assert checks.check_int(np.int32(3), "n") == 3
  with pytest.raises(ValueError, match="n must .* got 0"):
    checks.check_int(0, "n", lo=1)
  for bad in (2.0, True, "3", np.ones(2, int)):
    with pytest.raises(TypeError, match="n must be an integer"):
      checks.check_int(bad, "n")
  assert jax.jit(lambda k: checks.check_int(k, "n") or k)(3) == 3
