r"""The one scanned minibatch fit loop: ``num_steps`` optax steps as one ``lax.scan``.

Every training loop in jaxlab that takes gradient steps on a loss is this
function (DDPM pre-training, ReCouPLe's reward model, alpha-DPO fine-tuning,
TREC's AdamW runs, the optimizer test problems, the digit-pair dual encoder);
the losses stay in the method files. Step ``t`` is

.. math::
  b_t = \text{batch}(t), \quad (\ell_t, a_t) = L(\theta_t, b_t, k_t), \quad
  (u_t, s_{t+1}) = \mathrm{opt.update}(\nabla_\theta L, s_t, \theta_t), \quad
  \theta_{t+1} = \theta_t + u_t,

with the batch either the ``t``-th slice of a pytree of per-step batches
(``batches``, scanned over) or drawn by a sampler ``sample(key, step)``
(e.g. :func:`minibatch_sampler`: rows with replacement). The function is pure:
``jax.jit`` it, and ``jax.vmap`` it over seeds, data or traced
hyperparameters, as PureJaxRL's ``train``.

Keys. With a ``key`` each step splits the loop key into ``(next, batch_key,
loss_key)`` when there is a sampler and ``(next, loss_key)`` otherwise (jax's
partitionable threefry makes the first ``n`` keys of ``split(key, m)`` the same
for every ``m >= n``, so a loss that ignores its key sees the same batches as a
two-way split would give). Without a key (``key=None``) the loss gets
``None``: the data in ``batches`` is then all the randomness.

Example:
  >>> opt = optax.adam(1e-3)
  >>> loss = lambda p, batch, key: jnp.mean((batch[0] @ p - batch[1]) ** 2)
  >>> result = jax.jit(lambda p, k: fit(loss, opt, p, k, num_steps=500,
  ...                                   sample=minibatch_sampler((x, y), 64)))(w0, key)
  >>> w, losses = result.state.params, result.losses          # losses: (500,)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

__all__ = ["FitResult", "FitState", "StepMetrics", "fit", "minibatch_sampler"]


class FitState(NamedTuple):
  """Loop state of :func:`fit`.

  Attributes:
    params: the parameter pytree.
    opt_state: the optimizer's state.
    key: the loop's PRNG key (``None`` when :func:`fit` got no key).
    step: int32, steps taken so far (the ``step`` a sampler sees).
  """

  params: Any
  opt_state: optax.OptState
  key: jax.Array | None
  step: jax.Array


class StepMetrics(NamedTuple):
  """What :func:`fit` records at every step (leading axis ``num_steps``).

  Attributes:
    loss: the loss at the step's parameters, before its update.
    aux: the loss's auxiliary output (``None`` unless ``has_aux``).
    grad_norm: the global norm of the step's gradient (``None`` unless ``grad_norm``).
  """

  loss: jax.Array
  aux: Any
  grad_norm: jax.Array | None


class FitResult(NamedTuple):
  """Output of :func:`fit`.

  Attributes:
    state: the final :class:`FitState` (``state.params`` are the trained parameters).
    metrics: :class:`StepMetrics`, each leaf with leading axis ``num_steps``.
    evals: ``eval_fn``'s outputs stacked over the ``num_evals`` evaluations
      (``None`` without ``eval_fn``).
  """

  state: FitState
  metrics: StepMetrics
  evals: Any

  @property
  def losses(self) -> jax.Array:
    """``(num_steps,)`` training losses (``metrics.loss``)."""
    return self.metrics.loss


def minibatch_sampler(data: Any, batch_size: int) -> Callable[[jax.Array, jax.Array], Any]:
  """A sampler for :func:`fit`: ``batch_size`` rows drawn uniformly with replacement.

  Args:
    data: pytree of arrays sharing their leading axis ``N`` (one row per example).
    batch_size: rows per batch.

  Returns:
    ``sample(key, step) -> batch``, ``data`` indexed by one shared draw of
    ``randint(key, (batch_size,), 0, N)`` (``step`` is unused).
  """
  if not isinstance(batch_size, int | np.integer) or batch_size < 1:
    raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
  sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(data)}
  if len(sizes) != 1 or None in sizes:
    raise ValueError(f"data's leaves must share a leading axis, got sizes {sizes}")
  n = sizes.pop()

  def sample(key: jax.Array, step: jax.Array) -> Any:
    del step
    idx = jax.random.randint(key, (batch_size,), 0, n)
    return jax.tree.map(lambda x: x[idx], data)

  return sample


def _leading(tree: Any) -> int:
  sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in jax.tree.leaves(tree)}
  if len(sizes) != 1 or None in sizes:
    raise ValueError(f"batches' leaves must share a leading (step) axis, got sizes {sizes}")
  return sizes.pop()


def fit(
    loss_fn: Callable[..., Any],
    optimizer: optax.GradientTransformation,
    params: Any,
    key: jax.Array | None = None,
    *,
    num_steps: int | None = None,
    batches: Any = None,
    sample: Callable[[jax.Array, jax.Array], Any] | None = None,
    has_aux: bool = False,
    grad_norm: bool = False,
    eval_fn: Callable[[Any], Any] | None = None,
    num_evals: int = 1,
    opt_state: optax.OptState | None = None,
) -> FitResult:
  """Runs ``num_steps`` optimizer steps on ``loss_fn`` as one ``lax.scan``.

  Args:
    loss_fn: ``loss_fn(params, batch, key) -> loss`` (a scalar), or ``-> (loss,
      aux)`` with ``has_aux``. ``batch`` is the step's batch (``None`` with neither
      ``batches`` nor ``sample``: a full-batch objective, or one that draws its own
      minibatch from ``key``); ``key`` is a fresh key per step (``None`` without ``key``).
    optimizer: an optax gradient transformation (``update`` gets the params).
    params: initial parameter pytree.
    key: PRNG key of the loop, or ``None`` (then ``sample`` is not allowed).
    num_steps: number of steps (static); may be left out with ``batches``.
    batches: pytree whose leaves have leading axis ``num_steps``: step ``t`` uses
      ``batches[t]``. Exclusive with ``sample``.
    sample: ``sample(batch_key, step) -> batch`` drawn at every step (e.g.
      :func:`minibatch_sampler`).
    has_aux: ``loss_fn`` returns ``(loss, aux)``; ``aux`` is recorded per step.
    grad_norm: also record the global norm of each step's gradient.
    eval_fn: ``eval_fn(params) -> pytree``, recorded ``num_evals`` times, after
      every ``num_steps / num_evals`` steps (the last after the final step).
    num_evals: number of evaluations (static); must divide ``num_steps``.
    opt_state: the optimizer state to continue from (default ``optimizer.init(params)``),
      e.g. across the rollout / update iterations of an RL loop.

  Returns:
    A :class:`FitResult`: the final :class:`FitState`, per-step
    :class:`StepMetrics` (``result.losses`` is ``(num_steps,)``) and the evaluations.

  Raises:
    ValueError: for a missing or inconsistent ``num_steps``, ``num_evals`` not
      dividing it, both ``batches`` and ``sample``, or ``sample`` without a key.
  """
  if batches is not None and sample is not None:
    raise ValueError("pass batches (one per step) or sample (drawn per step), not both")
  if sample is not None and key is None:
    raise ValueError("sample needs a key: pass key to draw batches")
  if batches is not None:
    t = _leading(batches)
    if num_steps is not None and num_steps != t:
      raise ValueError(f"num_steps={num_steps} but batches have {t} steps")
    num_steps = t
  if not isinstance(num_steps, int | np.integer) or num_steps < 1:
    raise ValueError(f"num_steps must be a positive int (or given by batches), got {num_steps!r}")
  if not isinstance(num_evals, int | np.integer) or num_evals < 1 or num_steps % num_evals:
    raise ValueError(f"num_evals must be a positive int dividing num_steps={num_steps}, "
                     f"got {num_evals!r}")
  if eval_fn is None and num_evals != 1:
    raise ValueError("num_evals > 1 needs an eval_fn")
  value_and_grad = jax.value_and_grad(loss_fn if has_aux else lambda *a: (loss_fn(*a), None),
                                      has_aux=True)

  def step(state: FitState, batch: Any) -> tuple[FitState, StepMetrics]:
    next_key = batch_key = loss_key = None
    if state.key is not None:
      if sample is None:
        next_key, loss_key = jax.random.split(state.key)
      else:
        next_key, batch_key, loss_key = jax.random.split(state.key, 3)
    if sample is not None:
      batch = sample(batch_key, state.step)
    (loss, aux), grads = value_and_grad(state.params, batch, loss_key)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    metrics = StepMetrics(loss, aux, optax.tree.norm(grads) if grad_norm else None)
    new = FitState(optax.apply_updates(state.params, updates), opt_state, next_key,
                   state.step + 1)
    return new, metrics

  if opt_state is None:
    opt_state = optimizer.init(params)
  init = FitState(params, opt_state, key, jnp.zeros((), jnp.int32))
  if eval_fn is None:
    final, metrics = jax.lax.scan(step, init, batches, length=num_steps)
    return FitResult(final, metrics, None)

  per_eval = num_steps // num_evals

  def chunk(state: FitState, chunk_batches: Any) -> tuple[FitState, tuple[StepMetrics, Any]]:
    state, metrics = jax.lax.scan(step, state, chunk_batches, length=per_eval)
    return state, (metrics, eval_fn(state.params))

  if batches is not None:
    batches = jax.tree.map(lambda x: x.reshape(num_evals, per_eval, *x.shape[1:]), batches)
  final, (metrics, evals) = jax.lax.scan(chunk, init, batches, length=num_evals)
  metrics = jax.tree.map(lambda m: m.reshape(num_steps, *m.shape[2:]), metrics)
  return FitResult(final, metrics, evals)
