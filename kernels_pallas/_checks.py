"""Static argument checks shared by the kernels' wrappers (shapes, dtypes, Python values).

Each raises a ``TypeError`` / ``ValueError`` naming the argument and what it accepts,
before anything is traced.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
from jax.experimental.pallas import tpu as pltpu

ATTENTION_DTYPES = (jnp.float32, jnp.bfloat16)


def is_array(x: Any) -> bool:
  return hasattr(x, "shape") and hasattr(x, "dtype")


def check_arrays(**named: Any) -> None:
  """Each keyword's value must be an array (anything with ``shape`` and ``dtype``)."""
  for name, x in named.items():
    if not is_array(x):
      raise TypeError(f"{name} must be an array, got {type(x).__name__}")


def check_interpret(interpret: Any) -> None:
  if not isinstance(interpret, (bool, pltpu.InterpretParams)):
    raise TypeError(f"interpret must be a bool or a pltpu.InterpretParams, got {interpret!r}")


def check_scale(scale: Any) -> None:
  if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
    raise TypeError(f"scale must be None or a Python float (static), got {scale!r}")


def attention_scale(scale: float | None, head_dim: int) -> float:
  """``scale``, or ``1 / sqrt(head_dim)`` when it is None."""
  return 1.0 / math.sqrt(head_dim) if scale is None else float(scale)


def check_keys_values(q: Any, k: Any, v: Any, q_shape: str, k_name: str = "k",
                      v_name: str = "v") -> tuple[int, int, int]:
  """``k`` of shape ``(B, H, S, D)`` for ``q`` of shape ``(B, H, ..., D)``; ``v`` like ``k``;
  one dtype among :data:`ATTENTION_DTYPES`. ``q_shape`` names q's expected shape
  (``"(B, H, D)"`` or ``"(B, H, T, D)"``), whose rank is checked. Returns ``(B, H, D)``.
  """
  if q.ndim != q_shape.count(",") + 1:
    raise ValueError(f"q must have shape {q_shape}, got {tuple(q.shape)}")
  b, h, d = q.shape[0], q.shape[1], q.shape[-1]
  if k.ndim != 4 or k.shape[:2] != (b, h) or k.shape[3] != d:
    raise ValueError(f"{k_name} must have shape ({b}, {h}, {'P' if k_name != 'k' else 'S'}, "
                     f"{d}) for q of shape {tuple(q.shape)}, got {tuple(k.shape)}")
  if v.shape != k.shape:
    raise ValueError(f"{v_name} must have the shape of {k_name} {tuple(k.shape)}, got "
                     f"{tuple(v.shape)}")
  if q.dtype not in ATTENTION_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
    raise TypeError(f"q, {k_name} and {v_name} must share one dtype, float32 or bfloat16, got "
                    f"{q.dtype}, {k.dtype} and {v.dtype}")
  return b, h, d
