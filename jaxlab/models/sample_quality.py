r"""The shared sample-quality yardstick of generated 8 x 8 digits: Frechet distance, accuracy.

Our stand-in for Inception-FID (Heusel et al.) at the scale of scikit-learn's
digits: a small GELU MLP classifier (:class:`jaxlab.nn.MLP`, 64 -> hidden -> 10)
is trained once per run, from a seed, on a seeded train split of
:func:`jaxlab.data.digits.load_digits` ``("signed")`` (pixels in ``[-1, 1]``, the
range the generative models of issue 19 sample in) with :func:`jaxlab.training.fit`.
Its penultimate activations (the last hidden layer, after GELU) are the feature
map :math:`\phi`; with the feature means and covariances of two sample sets,

.. math::
  \mathrm{FD}(X, Y) = \lVert \mu_X - \mu_Y \rVert^2
      + \operatorname{tr}\big(\Sigma_X + \Sigma_Y
      - 2 (\Sigma_X^{1/2} \Sigma_Y \Sigma_X^{1/2})^{1/2}\big),

the Frechet (2-Wasserstein) distance between the Gaussians fitted to
:math:`\phi(X)` and :math:`\phi(Y)`. The trace of the cross term is computed on the
host in float64 from the symmetric PSD matrix :math:`\Sigma_X^{1/2} \Sigma_Y
\Sigma_X^{1/2}` (eigendecompositions, negative round-off eigenvalues clipped to 0),
which equals :math:`\operatorname{tr}\sqrt{\Sigma_X \Sigma_Y}` of the usual
``scipy.linalg.sqrtm`` formula without its complex round-off. The classifier's
argmax gives the class accuracy of samples generated for intended labels.

What is not Inception-FID: the feature network (a 2-hidden-layer MLP on 64
pixels, not Inception-v3 on 299 x 299 images), so values are comparable only
within one yardstick (same seed and config), not with published FIDs.

Example:
  >>> ys = Yardstick.create(0)                    # trains the classifier (about a second)
  >>> ys.test_accuracy                            # held-out real digits
  >>> ys.frechet_distance(samples, ys.reference)  # generated vs real held-out digits
  >>> ys.class_accuracy(samples, intended_labels)

References:
  Heusel et al., "GANs Trained by a Two Time-Scale Update Rule Converge to a Local
  Nash Equilibrium", NeurIPS 2017, arXiv:1706.08500 (FID).
  Dowson, Landau, "The Frechet distance between multivariate normal distributions",
  J. Multivariate Analysis, 1982.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.core.checks import check_int, check_range
from jaxlab.data.digits import load_digits
from jaxlab.nn import MLP, Net
from jaxlab.training.fit import fit, minibatch_sampler

__all__ = ["Yardstick", "YardstickConfig", "frechet_distance", "gaussian_stats",
           "frechet_distance_features"]

NUM_PIXELS = 64
NUM_CLASSES = 10


@dataclasses.dataclass(frozen=True)
class YardstickConfig:
  """The classifier and its training (static, hashable)."""

  hidden: tuple[int, ...] = (128, 64)  # MLP widths; the last is the feature dimension
  steps: int = 1500                    # Adam steps of jaxlab.training.fit
  batch_size: int = 128
  learning_rate: float = 2e-3
  test_fraction: float = 0.25          # held-out real digits (the reference set)

  def __post_init__(self):
    if not self.hidden or any(not isinstance(h, int) or h < 1 for h in self.hidden):
      raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
    check_int(self.steps, "steps", lo=1)
    check_int(self.batch_size, "batch_size", lo=1)
    check_range(self.learning_rate, "learning_rate", lo=0.0, lo_open=True)
    check_range(self.test_fraction, "test_fraction", lo=0.0, hi=1.0, lo_open=True, hi_open=True)


def _check_features(x: Any, name: str) -> np.ndarray:
  a = np.asarray(x, np.float64)
  if a.ndim != 2:
    raise ValueError(f"{name} must be 2-D (num_samples, num_features), got shape {a.shape}")
  if a.shape[0] < 2:
    raise ValueError(f"{name} needs at least 2 samples for a covariance, got {a.shape[0]}")
  if not np.all(np.isfinite(a)):
    raise ValueError(f"{name} must be finite")
  return a


def gaussian_stats(features: Any) -> tuple[np.ndarray, np.ndarray]:
  """Mean and (unbiased, ``ddof=1``) covariance of ``(N, D)`` features, in float64.

  Raises:
    ValueError: not 2-D, fewer than 2 rows, or non-finite values.
  """
  a = _check_features(features, "features")
  return a.mean(axis=0), np.cov(a, rowvar=False, ddof=1).reshape(a.shape[1], a.shape[1])


def _psd_sqrt(s: np.ndarray) -> np.ndarray:
  w, v = np.linalg.eigh((s + s.T) / 2)
  return (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T


def frechet_distance(mu1: Any, cov1: Any, mu2: Any, cov2: Any) -> float:
  r"""Frechet distance between :math:`N(\mu_1, \Sigma_1)` and :math:`N(\mu_2, \Sigma_2)`.

  :math:`\lVert\mu_1-\mu_2\rVert^2 + \operatorname{tr}\Sigma_1 + \operatorname{tr}\Sigma_2
  - 2\operatorname{tr}(\Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2})^{1/2}` (float64, host).

  Raises:
    ValueError: shapes that do not match ``(D,)`` / ``(D, D)``, or non-finite values.
  """
  mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
  cov1, cov2 = np.asarray(cov1, np.float64), np.asarray(cov2, np.float64)
  if mu1.ndim != 1 or mu1.shape != mu2.shape:
    raise ValueError(f"mu1 and mu2 must be vectors of one shape (D,), got {mu1.shape}, "
                     f"{mu2.shape}")
  d = mu1.shape[0]
  for name, c in (("cov1", cov1), ("cov2", cov2)):
    if c.shape != (d, d):
      raise ValueError(f"{name} must have shape {(d, d)} to match the means, got {c.shape}")
  for name, a in (("mu1", mu1), ("mu2", mu2), ("cov1", cov1), ("cov2", cov2)):
    if not np.all(np.isfinite(a)):
      raise ValueError(f"{name} must be finite")
  root1 = _psd_sqrt(cov1)
  cross = root1 @ cov2 @ root1
  eig = np.linalg.eigvalsh((cross + cross.T) / 2)
  tr_sqrt = np.sum(np.sqrt(np.clip(eig, 0.0, None)))
  diff = mu1 - mu2
  fd = diff @ diff + np.trace(cov1) + np.trace(cov2) - 2.0 * tr_sqrt
  return float(max(fd, 0.0))


def frechet_distance_features(features1: Any, features2: Any) -> float:
  """Frechet distance between the Gaussians fitted to two ``(N, D)`` feature sets."""
  f1 = _check_features(features1, "features1")
  f2 = _check_features(features2, "features2")
  if f1.shape[1] != f2.shape[1]:
    raise ValueError(f"features1 and features2 must have the same feature dimension, got "
                     f"{f1.shape[1]} and {f2.shape[1]}")
  return frechet_distance(*gaussian_stats(f1), *gaussian_stats(f2))


def _features(net: Net, x: jax.Array) -> jax.Array:
  """Penultimate activations: the MLP's hidden layers (GELU), without its output layer."""
  return net.module().features(x)


@jax.jit
def _features_jit(net: Net, x: jax.Array) -> jax.Array:
  return _features(net, x)


@jax.jit
def _logits_jit(net: Net, x: jax.Array) -> jax.Array:
  return net(x)


def _train(key: jax.Array, config: YardstickConfig, x: np.ndarray, y: np.ndarray) -> Net:
  k_init, k_fit = jax.random.split(key)
  seed = int(jax.random.randint(k_init, (), 0, 2**31 - 1))
  net = Net.create(MLP(NUM_PIXELS, config.hidden, NUM_CLASSES, rngs=nnx.Rngs(seed)))

  def loss(params, batch, _key):
    xb, yb = batch
    logits = net(xb, params=params)
    return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

  run = jax.jit(lambda p, k: fit(loss, optax.adam(config.learning_rate), p, k,
                                 num_steps=config.steps,
                                 sample=minibatch_sampler((jnp.asarray(x), jnp.asarray(y)),
                                                           config.batch_size)))
  params = run(net.params, k_fit).state.params
  return net.replace(params=params)


@dataclasses.dataclass(frozen=True, eq=False)
class Yardstick:
  """The trained classifier, its held-out real digits and their features.

  Attributes:
    net: the classifier (:class:`jaxlab.nn.Net` of an :class:`jaxlab.nn.MLP`).
    reference: ``(N_test, 64)`` held-out real digits in ``[-1, 1]`` (not trained on).
    reference_labels: ``(N_test,)`` their labels.
    test_accuracy: the classifier's accuracy on ``reference``.
    config: the :class:`YardstickConfig` it was built with.
  """

  net: Net
  reference: np.ndarray
  reference_labels: np.ndarray
  test_accuracy: float
  config: YardstickConfig

  @classmethod
  def create(cls, seed: int, config: YardstickConfig | None = None) -> Yardstick:
    """Splits the digits (seeded), trains the classifier (seeded), measures test accuracy.

    Args:
      seed: int seed of the split, the initialization and the minibatches.
      config: :class:`YardstickConfig` (default: the recorded one).
    """
    seed = check_int(seed, "seed", lo=0)
    config = YardstickConfig() if config is None else config
    if not isinstance(config, YardstickConfig):
      raise TypeError(f"config must be a YardstickConfig, got {type(config).__name__}")
    d = load_digits("signed")
    k_split, k_train = jax.random.split(jax.random.key(seed))
    order = np.asarray(jax.random.permutation(k_split, d.x.shape[0]))
    n_test = int(round(config.test_fraction * d.x.shape[0]))
    test, train = order[:n_test], order[n_test:]
    net = _train(k_train, config, d.x[train], d.y[train])
    pred = np.asarray(jnp.argmax(_logits_jit(net, d.x[test]), axis=-1))
    acc = float(np.mean(pred == d.y[test]))
    return cls(net, d.x[test].copy(), d.y[test].copy(), acc, config)

  def _inputs(self, x: Any, name: str) -> jax.Array:
    a = np.asarray(x, np.float32)
    if a.ndim != 2 or a.shape[1] != NUM_PIXELS:
      raise ValueError(f"{name} must have shape (num_samples, {NUM_PIXELS}) (flat 8x8 digits "
                       f"in [-1, 1]), got {a.shape}")
    return jnp.asarray(a)

  def features(self, x: Any) -> np.ndarray:
    """``(N, F)`` penultimate features of ``(N, 64)`` digits in ``[-1, 1]``."""
    return np.asarray(_features_jit(self.net, self._inputs(x, "x")))

  def predict(self, x: Any) -> np.ndarray:
    """``(N,)`` predicted classes (int32)."""
    return np.asarray(jnp.argmax(_logits_jit(self.net, self._inputs(x, "x")), axis=-1),
                      np.int32)

  def class_accuracy(self, x: Any, labels: Any) -> float:
    """Fraction of samples ``x`` the classifier assigns to their intended ``labels``."""
    pred = self.predict(x)
    labels = np.asarray(labels)
    if labels.shape != pred.shape or not np.issubdtype(labels.dtype, np.integer):
      raise ValueError(f"labels must be integers of shape {pred.shape} (one per sample), got "
                       f"{labels.dtype}{list(labels.shape)}")
    if np.any((labels < 0) | (labels >= NUM_CLASSES)):
      raise ValueError(f"labels must be in [0, {NUM_CLASSES - 1}]")
    return float(np.mean(pred == labels))

  def frechet_distance(self, x: Any, y: Any | None = None) -> float:
    """Frechet distance of the features of samples ``x`` and ``y`` (default: ``reference``).

    Raises:
      ValueError: a set that is not ``(N, 64)``, or has fewer than 2 samples.
    """
    fx = self.features(x)
    fy = self.features(self.reference if y is None else y)
    if fx.shape[0] < 2 or fy.shape[0] < 2:
      raise ValueError(f"each sample set needs at least 2 samples for a covariance, got "
                       f"{fx.shape[0]} and {fy.shape[0]}")
    return frechet_distance_features(fx, fy)
