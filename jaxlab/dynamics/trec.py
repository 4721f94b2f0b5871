r"""Training re-evaluation curves (TREC) and their prediction from AdamW's EMA coefficients.

A training re-evaluation curve re-evaluates the *final* weights on every batch
seen during training (Bergsma, Dey, Hestness, 2025):

.. math::
  \mathrm{TREC}(t) = L(\theta_T;\ B_t), \qquad t = 0, \dots, T-1.

AdamW as an EMA of updates (Wang & Aitchison, 2024). optax's ``adamw`` decays
the weights in proportion to the learning rate,
``theta_{t+1} = theta_t (1 - eta_t lambda) - eta_t u_t`` with ``u_t`` Adam's
bias-corrected direction, so unrolling the recursion gives exactly

.. math::
  \theta_T = \theta_0 \prod_{s=0}^{T-1} (1 - \eta_s\lambda) - \sum_{t=0}^{T-1} c_t u_t,
  \qquad c_t = \eta_t \prod_{s=t+1}^{T-1} (1 - \eta_s\lambda),

(:func:`adamw_ema_coefficients`); with a constant rate ``c_t`` is an EMA with
timescale ``tau = 1 / (eta lambda)`` steps.

**Predictor (ours; the paper's exact one is not recovered).** Batch ``t``'s
gradient ``g_t`` enters the directions ``u_s, s >= t`` through Adam's first
moment with weight ``(1 - b_1) b_1^{s-t} / (1 - b_1^{s+1})`` (the
bias-corrected momentum; the second-moment preconditioner is treated as a
per-coordinate constant), so the final weights hold batch ``t`` with weight

.. math::
  w_t = \sum_{s=t}^{T-1} c_s \frac{(1 - b_1)\, b_1^{s-t}}{1 - b_1^{s+1}}
  \qquad (w_t = c_t \text{ for } b_1 = 0, \text{ the default})

(:func:`batch_weights`). If the final model remembers batch ``t`` in proportion
to ``w_t`` and the rest of its loss on ``B_t`` does not depend on ``t``, then
``TREC(t) ~ L_inf - kappa w_t`` for some unknown ``L_inf, kappa > 0``. The
predicted curve is therefore only defined up to shift and scale:

.. math::
  \widehat{\mathrm{TREC}}(t) = -\, w_t / \max_s w_s,

(:func:`predict_trec`), compared to a measured curve by correlation; its
minimum is ``argmax_t w_t`` (:func:`predicted_minimum_step`), and the
contiguous window of ``n`` steps the final weights remember best is the one
maximizing ``sum w_t`` (:func:`best_window`), where a curriculum would place
its high-quality data.

**Interference (our extension).** Weight decay is not the only way the final
weights forget a batch: later updates on other data overwrite it too. The
optional ``forgetting`` rate ``phi >= 0`` models that as extra decay per unit
of learning rate, ``c_t = eta_t prod_{s>t} (1 - eta_s (lambda + phi))``;
``phi = 0`` is AdamW's pure EMA. :func:`fit_forgetting` calibrates ``phi`` on
one measured curve so it can be used to predict others.

Example:
  >>> lrs = lr_schedule("wsd", 1000, 3e-3, warmup_fraction=0.05, decay_fraction=0.2)
  >>> c = adamw_ema_coefficients(lrs, weight_decay=1.0)        # tau = 333 steps
  >>> pred = predict_trec(lrs, 1.0)                            # (1000,), min -1 at argmax c
  >>> start = best_window(lrs, 1.0, length=100)                # where to put the HQ slice
  >>> params, losses = train_adamw(loss_fn, params, batches, lrs, 1.0)
  >>> trec = training_reevaluation_curve(params, batches, loss_fn)

References:
  Bergsma, Dey, Hestness, "Predicting Training Re-evaluation Curves Enables
  Effective Data Curriculums for LLMs", arXiv:2509.25380, 2025.
  Wang, Aitchison, "How to set AdamW's weight decay as you scale model and
  dataset size", arXiv:2405.13698, 2024.
  Loshchilov, Hutter, "Decoupled Weight Decay Regularization", arXiv:1711.05101, 2017.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike

from jaxlab.core.checks import concrete
from jaxlab.training.fit import fit
from jaxlab.training.schedules import SCHEDULES, lr_schedule

__all__ = [
    "SCHEDULES",
    "adamw_ema_coefficients",
    "batch_weights",
    "best_window",
    "ema_timescale",
    "fit_forgetting",
    "lr_schedule",
    "moving_average",
    "predict_trec",
    "predicted_minimum_step",
    "train_adamw",
    "training_reevaluation_curve",
]



def _check(learning_rates: ArrayLike, weight_decay: ArrayLike) -> None:
  lrs = concrete(learning_rates, "learning_rates")
  wd = concrete(weight_decay, "weight_decay")
  if lrs is not None:
    if lrs.ndim != 1 or lrs.size == 0:
      raise ValueError(f"learning_rates must be a non-empty 1-D array of per-step rates, "
                       f"got shape {lrs.shape}")
    if not np.all(np.isfinite(lrs)) or np.any(lrs < 0):
      raise ValueError("learning_rates must be finite and >= 0")
  if wd is not None:
    if wd.ndim != 0 or not np.isfinite(wd) or wd < 0:
      raise ValueError(f"weight_decay must be a finite scalar >= 0, got {wd!r}")
    if lrs is not None and np.any(lrs * wd >= 1.0):
      raise ValueError(f"learning_rates * weight_decay must be < 1 at every step (else the "
                       f"decay factor 1 - eta lambda flips sign), got max "
                       f"{float(np.max(lrs * wd)):.3g}")


def adamw_ema_coefficients(learning_rates: ArrayLike, weight_decay: ArrayLike) -> jax.Array:
  r"""AdamW's EMA coefficients ``c_t = eta_t prod_{s>t} (1 - eta_s lambda)``.

  Exact for optax's ``adamw`` (decay scaled by the learning rate):
  ``theta_T = theta_0 prod_s (1 - eta_s lambda) - sum_t c_t u_t`` with ``u_t``
  the output of ``optax.scale_by_adam`` at step ``t``.

  Args:
    learning_rates: ``(T,)`` per-step rates ``eta_t`` (finite, ``>= 0``).
    weight_decay: ``lambda >= 0`` with ``eta_t lambda < 1``.

  Returns:
    ``(T,)`` coefficients ``c_t``.

  References:
    Wang, Aitchison, "How to set AdamW's weight decay as you scale model and dataset
    size", arXiv:2405.13698, 2024 (AdamW as an EMA of updates).
  """
  _check(learning_rates, weight_decay)
  return _ema_coefficients(jnp.asarray(learning_rates, jnp.result_type(float)),
                           jnp.asarray(weight_decay, jnp.result_type(float)))


@jax.jit
def _ema_coefficients(lrs: jax.Array, weight_decay: jax.Array) -> jax.Array:
  keep = 1.0 - lrs * weight_decay
  # prod_{s>t} keep_s: the reversed inclusive cumprod, shifted by one step.
  suffix = jnp.cumprod(keep[::-1])[::-1]
  return lrs * jnp.concatenate([suffix[1:], jnp.ones((1,), lrs.dtype)])


def ema_timescale(learning_rate: float, weight_decay: float) -> float:
  """AdamW's EMA timescale ``tau = 1 / (eta lambda)`` in steps (inf without decay)."""
  return float("inf") if learning_rate * weight_decay == 0 else 1.0 / (learning_rate * weight_decay)


def _check_extra(b1: float, forgetting: float) -> None:
  if not 0.0 <= b1 < 1.0:
    raise ValueError(f"b1 must be in [0, 1), got {b1!r}")
  phi = concrete(forgetting, "forgetting")
  if phi is not None and (phi.ndim != 0 or not np.isfinite(phi) or phi < 0):
    raise ValueError(f"forgetting must be a finite scalar >= 0, got {forgetting!r}")


def batch_weights(learning_rates: ArrayLike, weight_decay: ArrayLike, b1: float = 0.0,
                  forgetting: ArrayLike = 0.0) -> jax.Array:
  r"""Weight ``w_t`` with which the final AdamW weights hold batch ``t``'s gradient.

  ``w_t = sum_{s>=t} c_s (1 - b1) b1^{s-t} / (1 - b1^{s+1})``: the EMA
  coefficients spread back through Adam's bias-corrected first moment
  (``w = c`` for ``b1 = 0``), with ``c`` from :func:`adamw_ema_coefficients`
  at decay ``weight_decay + forgetting``.

  Args:
    learning_rates: ``(T,)`` per-step rates.
    weight_decay: ``lambda``.
    b1: Adam's first-moment decay, in ``[0, 1)``; 0 ignores momentum.
    forgetting: extra forgetting rate ``phi >= 0`` per unit learning rate (interference).

  Returns:
    ``(T,)`` weights ``w_t``.
  """
  _check_extra(b1, forgetting)
  c = adamw_ema_coefficients(learning_rates, jnp.asarray(weight_decay) + forgetting)
  return c if b1 == 0.0 else _through_momentum(c, b1)


@functools.partial(jax.jit, static_argnames="b1")
def _through_momentum(c: jax.Array, b1: float) -> jax.Array:
  steps = jnp.arange(1, c.shape[0] + 1, dtype=c.dtype)
  a = c * (1.0 - b1) / (1.0 - b1**steps)

  def back(acc, a_t):  # w_t = a_t + b1 w_{t+1}
    acc = a_t + b1 * acc
    return acc, acc

  _, w = jax.lax.scan(back, jnp.zeros((), c.dtype), a, reverse=True)
  return w


def predict_trec(learning_rates: ArrayLike, weight_decay: ArrayLike, b1: float = 0.0,
                 forgetting: ArrayLike = 0.0) -> jax.Array:
  r"""Predicted TREC shape ``-w_t / max_s w_s`` (shift and scale free; see the module docstring).

  Args:
    learning_rates: ``(T,)`` per-step rates.
    weight_decay: ``lambda``.
    b1: Adam's first-moment decay (the default 0 gives ``-c_t / max c``).
    forgetting: extra forgetting rate ``phi`` (0: AdamW's pure EMA).

  Returns:
    ``(T,)`` values in ``[-1, 0]``, lowest where the final weights remember most.
  """
  w = batch_weights(learning_rates, weight_decay, b1, forgetting)
  return -w / w.max()


def predicted_minimum_step(learning_rates: ArrayLike, weight_decay: ArrayLike, b1: float = 0.0,
                           forgetting: ArrayLike = 0.0) -> int:
  """The step at which the predicted TREC is lowest, ``argmax_t w_t``."""
  return int(jnp.argmax(batch_weights(learning_rates, weight_decay, b1, forgetting)))


def best_window(learning_rates: ArrayLike, weight_decay: ArrayLike, length: int,
                b1: float = 0.0, forgetting: ArrayLike = 0.0) -> int:
  """First step of the contiguous ``length``-step window with the largest ``sum w_t``.

  Args:
    learning_rates: ``(T,)`` per-step rates.
    weight_decay: ``lambda``.
    length: window length in steps, ``1 <= length <= T``.
    b1: Adam's first-moment decay.
    forgetting: extra forgetting rate ``phi``.

  Returns:
    ``start`` such that steps ``start .. start + length - 1`` maximize ``sum w_t``.
  """
  w = np.asarray(batch_weights(learning_rates, weight_decay, b1, forgetting), np.float64)
  if not isinstance(length, int | np.integer) or not 1 <= length <= w.size:
    raise ValueError(f"length must be an int in [1, {w.size}], got {length!r}")
  sums = np.convolve(w, np.ones(length), mode="valid")  # sums[i] = w[i:i+length].sum()
  return int(np.argmax(sums))


def moving_average(curve: ArrayLike, window: int) -> np.ndarray:
  """Centered moving average of a 1-D curve, same length (the window shrinks at the ends).

  Measured TRECs are noisy batch by batch; the predicted curves are smooth.
  """
  x = np.asarray(curve, np.float64)
  if x.ndim != 1:
    raise ValueError(f"curve must be 1-D, got shape {x.shape}")
  if not isinstance(window, int | np.integer) or window < 1:
    raise ValueError(f"window must be a positive int, got {window!r}")
  csum = np.concatenate([[0.0], np.cumsum(x)])
  idx = np.arange(x.size)
  lo = np.maximum(idx - window // 2, 0)
  hi = np.minimum(idx - window // 2 + window, x.size)
  return (csum[hi] - csum[lo]) / (hi - lo)


def fit_forgetting(curve: ArrayLike, learning_rates: ArrayLike, weight_decay: float,
                   candidates: ArrayLike, window: int = 1, b1: float = 0.0) -> float:
  """The forgetting rate ``phi`` among ``candidates`` whose prediction best fits a curve.

  Best = the highest Pearson correlation between :func:`predict_trec` and the
  measured ``curve``, both smoothed by :func:`moving_average` over ``window``.

  Args:
    curve: ``(T,)`` measured TREC.
    learning_rates: ``(T,)`` rates it was trained with.
    weight_decay: its ``lambda``.
    candidates: forgetting rates to try (``>= 0``).
    window: smoothing window in steps.
    b1: Adam's first-moment decay used by the predictor.

  Returns:
    The best candidate.
  """
  y = moving_average(curve, window)
  cands = np.asarray(candidates, np.float64).reshape(-1)
  if cands.size == 0:
    raise ValueError("candidates must not be empty")
  scores = [np.corrcoef(moving_average(predict_trec(learning_rates, weight_decay, b1, phi),
                                       window), y)[0, 1] for phi in cands]
  return float(cands[int(np.nanargmax(scores))])


def train_adamw(loss_fn: Callable[[Any, Any], jax.Array], params: Any, batches: Any,
                learning_rates: ArrayLike, weight_decay: ArrayLike, *, b1: float = 0.9,
                b2: float = 0.999, eps: float = 1e-8) -> tuple[Any, jax.Array]:
  """Trains with ``optax.adamw`` on one batch per step (a ``lax.scan``; jit and vmap freely).

  Step ``t`` takes the gradient of ``loss_fn(params, batch_t)`` and applies
  ``optax.adamw`` with learning rate ``learning_rates[t]``; ``learning_rates``
  and ``weight_decay`` may be traced, e.g. vmapped over configurations. The loop
  is the shared :func:`jaxlab.training.fit` over the scanned ``batches``.

  Args:
    loss_fn: ``(params, batch) -> scalar``.
    params: initial parameter pytree.
    batches: pytree whose leaves have a leading axis of length ``T`` (step ``t``'s batch).
    learning_rates: ``(T,)`` per-step rates.
    weight_decay: ``lambda`` (optax's decay, scaled by the learning rate).
    b1, b2, eps: Adam's hyperparameters.

  Returns:
    ``(final_params, losses)`` with ``losses[t]`` the training loss at step ``t``
    (before its update).
  """
  _check(learning_rates, weight_decay)
  lrs = jnp.asarray(learning_rates)
  opt = optax.adamw(lambda count: lrs[jnp.minimum(count, lrs.shape[0] - 1)], b1=b1, b2=b2,
                    eps=eps, weight_decay=weight_decay)
  result = fit(lambda p, batch, _: loss_fn(p, batch), opt, params, batches=batches)
  return result.state.params, result.losses


@functools.partial(jax.jit, static_argnames=("loss_fn", "chunk"))
def training_reevaluation_curve(final_params: Any, batches: Any,
                                loss_fn: Callable[[Any, Any], jax.Array],
                                chunk: int | None = None) -> jax.Array:
  r"""Measured TREC: ``TREC(t) = loss_fn(final_params, batches[t])`` for every step.

  Evaluated with ``lax.map`` (one batch, or ``chunk`` batches vectorized, at a
  time), so memory does not grow with the number of steps.

  Args:
    final_params: the weights after training.
    batches: pytree with leading axis ``T``, the batches in the order they were seen.
    loss_fn: ``(params, batch) -> scalar`` (hashable: a static jit argument).
    chunk: batches evaluated at once (``lax.map``'s ``batch_size``); None for one.

  Returns:
    ``(T,)`` losses.
  """
  return jax.lax.map(lambda b: loss_fn(final_params, b), batches, batch_size=chunk)

