"""Argument checks on concrete values, skipped for traced ones (a leaf module).

Numeric hyperparameters may legitimately be tracers (``optax.inject_hyperparams``
re-calls factories with them, sweeps ``vmap`` over them), so a check validates a
value only when it is concrete and never branches in Python on a traced one.
Errors name the argument and the accepted range, and are raised before tracing.

Example:
  >>> check_range(b1, "b1", lo=0.0, hi=1.0, hi_open=True)    # b1 in [0, 1)
  >>> n = check_int(num_steps, "num_steps", lo=1)            # int, or None if traced
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = ["check_int", "check_range", "concrete", "is_traced"]


def is_traced(value: Any) -> bool:
  """Whether ``value`` is (or holds) a JAX tracer, so that it cannot be inspected."""
  return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(value))


def concrete(value: Any, name: str, *, scalar: bool = False) -> np.ndarray | None:
  """``value`` as a real NumPy array, or ``None`` while it is traced.

  Args:
    value: a Python number, NumPy or JAX array, or a tracer.
    name: the argument's name, for error messages.
    scalar: require shape ``()`` (checked on tracers too).

  Raises:
    TypeError: ``value`` is a bool, or not real numbers.
    ValueError: ``scalar`` and ``value`` is not a scalar.
  """
  if isinstance(value, jax.core.Tracer):
    if scalar and np.shape(value) != ():
      raise ValueError(f"{name} must be a scalar, got shape {np.shape(value)}")
    return None
  if isinstance(value, bool):
    raise TypeError(f"{name} must be a real number, got {value!r}")
  try:
    arr = np.asarray(value)
  except (TypeError, jax.errors.TracerArrayConversionError) as err:
    raise TypeError(f"{name} must be a real number, got {value!r}") from err
  if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
    raise TypeError(f"{name} must be real numbers, got {value!r} of dtype {arr.dtype}")
  if scalar and arr.shape != ():
    raise ValueError(f"{name} must be a scalar, got shape {arr.shape}")
  return arr


def _interval(lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> str:
  left = "(" if lo_open or lo is None else "["
  right = ")" if hi_open or hi is None else "]"
  return f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"


def check_range(value: Any, name: str, *, lo: float | None = None, hi: float | None = None,
                lo_open: bool = False, hi_open: bool = False, scalar: bool = True,
                finite: bool = True) -> np.ndarray | None:
  """Checks that every element of a concrete ``value`` lies in the interval.

  Args:
    value: the value (skipped, beyond its shape, when traced).
    name: the argument's name, for error messages.
    lo, hi: bounds (``None``: unbounded).
    lo_open, hi_open: exclude the bound.
    scalar: require shape ``()``.
    finite: reject NaN and infinities.

  Returns:
    The concrete value as a NumPy array, or ``None`` when traced.

  Raises:
    ValueError: naming the argument, the interval and the offending value.
  """
  arr = concrete(value, name, scalar=scalar)
  if arr is None:
    return None
  x = arr.astype(np.float64)
  ok = np.isfinite(x) if finite else ~np.isnan(x)
  if lo is not None:
    ok &= (x > lo) if lo_open else (x >= lo)
  if hi is not None:
    ok &= (x < hi) if hi_open else (x <= hi)
  if not np.all(ok):
    bad = arr.item() if arr.ndim == 0 else arr[~ok][0].item()
    need = "finite and in" if finite and not np.isfinite(bad) else "in"
    raise ValueError(f"{name} must be {need} {_interval(lo, hi, lo_open, hi_open)}, "
                     f"got {bad!r}")
  return arr


def check_int(value: Any, name: str, *, lo: int | None = None,
              hi: int | None = None) -> int | None:
  """A concrete integer scalar in ``[lo, hi]`` as a Python int; ``None`` if traced.

  Raises:
    TypeError: ``value`` is not an integer (floats and bools included).
    ValueError: out of range.
  """
  if isinstance(value, jax.core.Tracer):
    if np.shape(value) != () or not np.issubdtype(value.dtype, np.integer):
      raise TypeError(f"{name} must be an integer scalar, got {value.dtype}{list(value.shape)}")
    return None
  if isinstance(value, bool) or not isinstance(value, (int, np.integer, np.ndarray, jax.Array)):
    raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
  arr = np.asarray(value)
  if arr.shape != () or not np.issubdtype(arr.dtype, np.integer):
    raise TypeError(f"{name} must be an integer scalar, got {value!r}")
  check_range(arr, name, lo=lo, hi=hi)
  return int(arr)
