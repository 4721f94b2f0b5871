"""A classifier and a scanned training loop for optimizer studies.

Used by ``experiments/quant_optim.py``, ``experiments/bench_quant_optim.py`` and the
tests, on the problems of :mod:`jaxlab.data.optim_problems` (Rosenbrock, least squares,
digits / MNIST / CIFAR-10 classification):

* :class:`MLP` (flax nnx, held as a :class:`~jaxlab.nn.Net` by :func:`mlp_net`): a GELU
  MLP classifier for :func:`jaxlab.data.optim_problems.load_classification`'s data.

:func:`train` runs an optax optimizer for a fixed number of steps as one
``lax.scan`` (the shared :func:`jaxlab.training.fit`) and records the objective
along the way, so a whole grid of configurations can be ``jax.vmap``-ed and
compiled once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.nn import Net
from jaxlab.training.fit import fit


class MLP(nnx.Module):
  """A GELU MLP classifier: ``Linear -> gelu -> ... -> Linear`` (logits)."""

  def __init__(self, sizes: tuple[int, ...], *, rngs: nnx.Rngs):
    self.layers = nnx.List(
        [nnx.Linear(i, o, rngs=rngs) for i, o in zip(sizes[:-1], sizes[1:], strict=True)]
    )

  def __call__(self, x: jax.Array) -> jax.Array:
    for layer in self.layers[:-1]:
      x = jax.nn.gelu(layer(x))
    return self.layers[-1](x)


def mlp_net(sizes: tuple[int, ...], seed: int) -> Net:
  """An :class:`MLP` held as a :class:`~jaxlab.nn.Net`: ``net(x, params=p)`` gives logits."""
  return Net.create(MLP(sizes, rngs=nnx.Rngs(seed)))


def mlp_functional(sizes: tuple[int, ...], seed: int) -> tuple[Callable, Any]:
  """The older closure form of :func:`mlp_net`: ``(apply(params, x), params)``."""
  net = mlp_net(sizes, seed)
  return (lambda params, x: net(x, params=params)), net.params


def train(
    opt: optax.GradientTransformation,
    loss_fn: Callable[[Any, jax.Array], jax.Array],
    params: Any,
    key: jax.Array,
    num_steps: int,
    *,
    eval_fn: Callable[[Any], jax.Array] | None = None,
    num_evals: int = 1,
) -> tuple[Any, jax.Array]:
  """Runs ``num_steps`` optimizer steps as one ``lax.scan`` (:func:`jaxlab.training.fit`).

  Args:
    opt: the optimizer.
    loss_fn: ``loss_fn(params, key) -> scalar``; the key draws a minibatch
      (ignore it for full-batch objectives).
    params: initial parameters.
    key: PRNG key for minibatches.
    num_steps: total steps (static); must be a multiple of ``num_evals``.
    eval_fn: ``eval_fn(params) -> scalar`` recorded ``num_evals`` times, after
      every ``num_steps / num_evals`` steps (default: ``loss_fn`` at a fixed key);
      non-finite values are recorded as ``inf``.
    num_evals: number of recorded evaluations.

  Returns:
    ``(final_params, evals)`` with ``evals`` of shape ``(num_evals,)``.
  """
  if num_steps % num_evals:
    raise ValueError(f"num_steps={num_steps} must be a multiple of num_evals={num_evals}")
  if eval_fn is None:
    eval_fn = lambda p: loss_fn(p, jax.random.key(0))

  def record(p):
    value = eval_fn(p)
    return jnp.where(jnp.isfinite(value), value, jnp.inf)

  # no batch: the loss draws its own minibatch from the step's key
  result = fit(lambda p, _, k: loss_fn(p, k), opt, params, key, num_steps=num_steps,
               eval_fn=record, num_evals=num_evals)
  return result.state.params, result.evals
