"""Optimization test problems: small deterministic objectives and classification data.

Used by the optimizer studies (``jaxlab.optim``, ``experiments/quant_optim.py``,
``experiments/bench_quant_optim.py``); the MLP classifier and the scanned training loop
live in :mod:`jaxlab.optim.problems`.

* :func:`rosenbrock`: the chained Rosenbrock function over any array;
* :func:`make_least_squares`: a random linear regression, noiseless or noisy;
* :func:`load_classification`: scikit-learn's bundled digits (the ``"pixels"``
  variant of :func:`jaxlab.data.digits.load_digits`), or MNIST / CIFAR-10 through
  ``tfds.data_source`` when that data is prepared locally as ArrayRecord,
  standardized on the train split.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.data.digits import load_digits


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
      or "cifar10" (read with ``tfds.data_source`` from ``data_dir``, which needs
      no TensorFlow but reads only the ArrayRecord format; prepare them once
      where there is internet, e.g. in Colab, with TensorFlow installed:
      ``tfds.builder(name, data_dir=...).download_and_prepare(file_format="array_record")``).
    data_dir: TFDS data directory (default: TFDS's, ``$TFDS_DATA_DIR`` or
      ``~/tensorflow_datasets``).
    max_examples: cap per split (TFDS datasets only).
    test_fraction: held-out fraction for digits.
    seed: split seed for digits.

  Returns:
    A :class:`Classification` with features standardized on the train split.
  """
  if name not in DATASETS:
    raise ValueError(f"name must be one of {DATASETS}, got {name!r}")
  if name == "digits":
    from sklearn.model_selection import train_test_split

    d = load_digits("pixels")
    x_tr, x_te, y_tr, y_te = train_test_split(
        d.x, d.y, test_size=test_fraction, random_state=seed, stratify=d.y)
  else:
    x_tr, y_tr, x_te, y_te = _from_data_source(name, data_dir, max_examples)
  mean, std = x_tr.mean(0), x_tr.std(0) + 1e-6
  return Classification((x_tr - mean) / std, y_tr, (x_te - mean) / std, y_te,
                        int(max(y_tr.max(), y_te.max())) + 1)
