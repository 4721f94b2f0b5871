"""Test problems and a scanned training loop for optimizer studies.

Small, deterministic objectives on which quantized optimizers are compared
(used by ``experiments/quant_optim.py``, ``experiments/bench_quant_optim.py``
and the tests):

* :func:`rosenbrock`: the chained Rosenbrock function over any array;
* :func:`make_least_squares`: a random linear regression, noiseless or noisy;
* :class:`MLP` (flax nnx, held as a :class:`~jaxlab.nn.Net` by :func:`mlp_net`) and
  :func:`load_classification`: an MLP classifier on
  scikit-learn's bundled digits, or MNIST / CIFAR-10 through
  ``tfds.data_source`` when that data is present locally.

:func:`train` runs an optax optimizer for a fixed number of steps as one
``lax.scan`` (the shared :func:`jaxlab.training.fit`) and records the objective
along the way, so a whole grid of configurations can be ``jax.vmap``-ed and
compiled once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.nn import Net
from jaxlab.training.fit import fit


def rosenbrock(x: jax.Array, a: float = 1.0, b: float = 100.0) -> jax.Array:
  """Chained Rosenbrock ``sum_i b (x_{i+1} - x_i^2)^2 + (a - x_i)^2`` over ``x.ravel()``.

  Minimum 0 at ``x = a`` everywhere. A matrix-shaped ``x`` lets Muon (which
  acts on 2-D parameters) and Adam optimize the same function.
  """
  v = x.reshape(-1)
  return jnp.sum(b * (v[1:] - v[:-1] ** 2) ** 2 + (a - v[:-1]) ** 2)


class LeastSquares(NamedTuple):
  """``min_W 0.5 * mean((A W - B)^2)`` with ``B = A W* + noise * N``."""

  a: jax.Array
  b: jax.Array

  def loss(self, w: jax.Array, idx: jax.Array | None = None) -> jax.Array:
    a, b = (self.a, self.b) if idx is None else (self.a[idx], self.b[idx])
    return 0.5 * jnp.mean((a @ w - b) ** 2)


def make_least_squares(
    key: jax.Array, num_rows: int = 256, dim_in: int = 32, dim_out: int = 16, noise: float = 0.0
) -> LeastSquares:
  """A random regression problem (noise 0: the optimum has loss 0).

  ``A`` and ``W*`` are standard normal, so the solution's entries are O(1)
  (weight quantization then acts at a realistic relative scale).
  """
  k1, k2, k3 = jax.random.split(key, 3)
  a = jax.random.normal(k1, (num_rows, dim_in))
  w_star = jax.random.normal(k2, (dim_in, dim_out))
  b = a @ w_star + noise * jax.random.normal(k3, (num_rows, dim_out))
  return LeastSquares(a, b)


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


class Classification(NamedTuple):
  x_train: np.ndarray
  y_train: np.ndarray
  x_test: np.ndarray
  y_test: np.ndarray
  num_classes: int


DATASETS = ("digits", "mnist", "cifar10")


def _from_data_source(name: str, data_dir: str | None, max_examples: int | None):
  import tensorflow_datasets as tfds  # data_source needs no TensorFlow

  out = []
  for split in ("train", "test"):
    source = tfds.data_source(name, split=split, data_dir=data_dir, download=False)
    n = len(source) if max_examples is None else min(len(source), max_examples)
    items = [source[i] for i in range(n)]
    x = np.stack([np.asarray(it["image"], np.float32).reshape(-1) / 255.0 for it in items])
    y = np.asarray([int(it["label"]) for it in items], np.int32)
    out += [x, y]
  return out


def load_classification(
    name: str = "digits",
    *,
    data_dir: str | None = None,
    max_examples: int | None = None,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> Classification:
  """Loads a small classification dataset as standardized float32 arrays.

  Args:
    name: "digits" (scikit-learn's bundled 8x8 digits, no download), "mnist"
      or "cifar10" (read with ``tfds.data_source`` from ``data_dir``; prepare
      them once with ``tfds build mnist`` / ``tfds.builder(name).download_and_prepare()``
      where there is internet, e.g. in Colab).
    data_dir: TFDS data directory (default: TFDS's).
    max_examples: cap per split (TFDS datasets only).
    test_fraction: held-out fraction for digits.
    seed: split seed for digits.

  Returns:
    A :class:`Classification` with features standardized on the train split.
  """
  if name not in DATASETS:
    raise ValueError(f"name must be one of {DATASETS}, got {name!r}")
  if name == "digits":
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x_tr, x_te, y_tr, y_te = train_test_split(
        d.data.astype(np.float32), d.target.astype(np.int32),
        test_size=test_fraction, random_state=seed, stratify=d.target)
  else:
    x_tr, y_tr, x_te, y_te = _from_data_source(name, data_dir, max_examples)
  mean, std = x_tr.mean(0), x_tr.std(0) + 1e-6
  return Classification((x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te,
                        int(max(y_tr.max(), y_te.max())) + 1)


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
