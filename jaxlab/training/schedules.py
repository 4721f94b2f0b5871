"""Learning-rate schedules as per-step arrays (optax schedules evaluated once)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

__all__ = ["SCHEDULES", "lr_schedule"]

SCHEDULES = ("constant", "cosine", "wsd")


def lr_schedule(kind: str, num_steps: int, peak_lr: float, *, warmup_fraction: float = 0.0,
                decay_fraction: float = 0.2) -> jax.Array:
  """Per-step learning rates of a named schedule, evaluated from optax schedules.

  * ``constant``: linear warmup from 0, then ``peak_lr``;
  * ``cosine``: linear warmup, then cosine decay to 0 at ``num_steps``;
  * ``wsd`` (warmup-stable-decay): linear warmup, constant, then a linear
    decay to ``peak_lr / decay_steps`` (one step from 0) over the last
    ``decay_fraction`` of training.

  Args:
    kind: one of ``SCHEDULES``.
    num_steps: ``T``.
    peak_lr: rate after warmup.
    warmup_fraction: fraction of steps of linear warmup from 0.
    decay_fraction: fraction of steps of the WSD decay (only ``wsd``).

  Returns:
    ``(num_steps,)`` float32 rates; step ``t`` uses entry ``t``.
  """
  if kind not in SCHEDULES:
    raise ValueError(f"kind must be one of {SCHEDULES}, got {kind!r}")
  if not isinstance(num_steps, int) or num_steps < 1:
    raise ValueError(f"num_steps must be a positive int, got {num_steps!r}")
  if not (np.isfinite(peak_lr) and peak_lr > 0):
    raise ValueError(f"peak_lr must be finite and > 0, got {peak_lr!r}")
  for name, frac in (("warmup_fraction", warmup_fraction), ("decay_fraction", decay_fraction)):
    if not 0.0 <= frac <= 1.0:
      raise ValueError(f"{name} must be in [0, 1], got {frac!r}")
  warmup = int(round(warmup_fraction * num_steps))
  if kind == "constant":
    sched = optax.join_schedules(
        [optax.linear_schedule(0.0, peak_lr, max(warmup, 1)), optax.constant_schedule(peak_lr)],
        [warmup])
  elif kind == "cosine":
    sched = optax.warmup_cosine_decay_schedule(0.0, peak_lr, warmup, num_steps)
  else:
    decay = max(int(round(decay_fraction * num_steps)), 1)
    if warmup + decay > num_steps:
      raise ValueError(f"warmup_fraction + decay_fraction must be <= 1, got "
                       f"{warmup_fraction} + {decay_fraction}")
    sched = optax.join_schedules(
        [optax.linear_schedule(0.0, peak_lr, max(warmup, 1)), optax.constant_schedule(peak_lr),
         optax.linear_schedule(peak_lr, peak_lr / decay, decay - 1)],
        [warmup, num_steps - decay])
  return jax.jit(jax.vmap(sched))(jnp.arange(num_steps)).astype(jnp.float32)  # one compile
