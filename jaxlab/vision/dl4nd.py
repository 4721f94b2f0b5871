r"""DL4ND: cross-domain noise detection and relabelling (the method's core, on small digits).

DL4ND ("Domain Labels for Noise Detection") observes that a sample whose label is wrong sits
near its true class in the *other* domains' features, while inside its own domain a model
that has started to fit the noise may already have pulled it toward its wrong label. After a
warm-up of ordinary training (ERM, or any domain-generalization method) on the noisy labels:

1. **Split.** Per-sample losses :math:`\ell_n = -\log p_\theta(\tilde y_n \mid x_n)`; a
   two-component 1-D Gaussian mixture is fitted to them and a sample is *clean* when the
   posterior of the low-mean component exceeds 0.5, *suspect* otherwise
   (:func:`gmm_split`, scikit-learn's ``GaussianMixture`` on the host).
2. **Proxies.** For every class :math:`c` and domain :math:`i`, the mean feature of the
   clean samples labelled :math:`c` in domain :math:`i`:
   :math:`\bar g_{c,i} = \frac{1}{|S_{c,i}|} \sum_{n \in S_{c,i}} f_\theta(x_n)`
   (:func:`class_domain_proxies`; :math:`f_\theta` the penultimate features).
3. **Cross-domain relabelling.** A suspect sample :math:`x` from domain :math:`\hat\imath`
   gets the class of its nearest proxy in another domain,
   :math:`\hat y = c^\star`, :math:`(c^\star, i^\star) = \arg\min_{(c, i),\, i \ne \hat\imath}
   d(f_\theta(x), \bar g_{c,i})` with the cosine distance :math:`d(a, b) = 1 - \frac{a \cdot
   b}{\lVert a\rVert \lVert b\rVert}` (:func:`nearest_proxy_labels`, ``mode="cross"``).
4. **Training.** The labels are corrected **once**; every sample is kept (with its corrected
   label) and training continues.

Ablations (the paper's): ``mode="within"`` looks only at proxies of the sample's own domain
(:math:`i = \hat\imath`); ``proxy_set="all"`` builds the proxies from every sample, suspects
included (:func:`relabel`).

What is the paper's and what is ours: the split, the proxies, the cosine nearest-proxy rule in
other domains and the single relabelling are the paper's (arXiv 2504.02996, section 3; its
code was not read, so the details are from the text). Our stand-ins: a GELU MLP
(:class:`jaxlab.nn.MLP`, 64 -> 128 -> 64 features -> 10, the architecture of issue 13's digits
classifier :class:`jaxlab.models.sample_quality.Yardstick`) trained by
:func:`jaxlab.training.fit` instead of a ResNet, and 8 x 8 digits rotated by right angles
(:mod:`jaxlab.data.rotated_digits`) instead of RotatedMNIST / DomainNet. The Yardstick itself
does not fit here: it is trained once, on clean labels, on its own split; DL4ND trains on
noisy labels, continues from its warm-up, and reads the features of its own network.

Example:
  >>> net = create_classifier(jax.random.key(0))
  >>> net = train(net, key, x, noisy, num_steps=300)                     # warm-up
  >>> out = relabel(features(net, x), per_sample_losses(net, x, noisy), noisy, domain,
  ...               num_classes=10, num_domains=4)                        # mode="cross"
  >>> net = train(net, key2, x, out.labels, num_steps=1500)              # continue

References:
  Wang, Liu, Plummer, "Noise-Aware Generalization: Robustness to
  In-Domain Noise and Out-of-Domain Generalization", ICLR 2026, arXiv:2504.02996.
  Li, Socher, Hoi, "DivideMix: Learning with Noisy Labels as Semi-supervised Learning",
  ICLR 2020, arXiv:2002.07394 (the two-component GMM on per-sample losses).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from jaxlab.core.checks import check_int, check_range
from jaxlab.nn import MLP, Net
from jaxlab.training.fit import fit, minibatch_sampler

__all__ = ["MODES", "PROXY_SETS", "ClassifierConfig", "GMMSplit", "Proxies", "Relabelled",
           "class_domain_proxies", "create_classifier", "features", "gmm_split",
           "nearest_proxy_labels", "per_sample_losses", "predict", "relabel", "train"]

MODES = ("cross", "within")  # proxies of the other domains (DL4ND) / of the sample's own
PROXY_SETS = ("clean", "all")  # proxies from the GMM's clean samples (DL4ND) / from every one


@dataclasses.dataclass(frozen=True)
class ClassifierConfig:
  """The classifier and its optimizer (static, hashable).

  Attributes:
    in_dim: input features (64 pixels of an 8 x 8 digit).
    hidden: MLP widths; the last is the feature dimension of the proxies.
    num_classes: output classes.
    batch_size: rows per Adam step (drawn with replacement by ``minibatch_sampler``).
    learning_rate: Adam's step size.
  """

  in_dim: int = 64
  hidden: tuple[int, ...] = (128, 64)
  num_classes: int = 10
  batch_size: int = 64
  learning_rate: float = 1e-3

  def __post_init__(self):
    check_int(self.in_dim, "in_dim", lo=1)
    if not self.hidden or any(not isinstance(h, int) or h < 1 for h in self.hidden):
      raise ValueError(f"hidden must be a non-empty tuple of positive ints, got {self.hidden!r}")
    check_int(self.num_classes, "num_classes", lo=2)
    check_int(self.batch_size, "batch_size", lo=1)
    check_range(self.learning_rate, "learning_rate", lo=0.0, lo_open=True)


def create_classifier(key: jax.Array, config: ClassifierConfig | None = None) -> Net:
  """A fresh :class:`jaxlab.nn.MLP` classifier (``in_dim -> hidden -> num_classes``) as a Net."""
  config = ClassifierConfig() if config is None else config
  if not isinstance(config, ClassifierConfig):
    raise TypeError(f"config must be a ClassifierConfig, got {type(config).__name__}")
  return Net.create(MLP(config.in_dim, config.hidden, config.num_classes, rngs=nnx.Rngs(key)))


def _check_xy(x: Any, y: Any, num_classes: int | None = None) -> None:
  if jnp.ndim(x) != 2:
    raise ValueError(f"x must be 2-D (num_samples, in_dim), got shape {jnp.shape(x)}")
  if jnp.ndim(y) != 1 or jnp.shape(y)[0] != jnp.shape(x)[0]:
    raise ValueError(f"labels must have shape ({jnp.shape(x)[0]},) (one per row of x), got "
                     f"{jnp.shape(y)}")
  if not jnp.issubdtype(jnp.result_type(y), jnp.integer):
    raise TypeError(f"labels must be integers, got {jnp.result_type(y)}")
  if num_classes is not None and not isinstance(y, jax.core.Tracer):
    yy = np.asarray(y)
    if yy.size and (yy.min() < 0 or yy.max() >= num_classes):
      raise ValueError(f"labels must be in [0, {num_classes - 1}], got {yy.min()}..{yy.max()}")


@functools.partial(jax.jit, static_argnames=("num_steps", "config"))
def _train(net: Net, key: jax.Array, x: jax.Array, y: jax.Array, num_steps: int,
           config: ClassifierConfig) -> Net:
  def loss(params, batch, _key):
    xb, yb = batch
    return optax.softmax_cross_entropy_with_integer_labels(net(xb, params=params), yb).mean()

  res = fit(loss, optax.adam(config.learning_rate), net.params, key, num_steps=num_steps,
            sample=minibatch_sampler((x, y), config.batch_size))
  return net.replace(params=res.state.params)


def train(net: Net, key: jax.Array, x: Any, labels: Any, num_steps: int,
          config: ClassifierConfig | None = None) -> Net:
  """``num_steps`` Adam steps of mean cross-entropy on ``(x, labels)`` from ``net``'s params.

  One :func:`jaxlab.training.fit` scan (minibatches drawn with replacement), compiled once per
  shape, step count and config; a fresh Adam state (a continuation after relabelling restarts
  the optimizer's moments). Vmappable over labels, keys or nets.

  Raises:
    ValueError / TypeError: shapes that do not match, non-integer or out-of-range labels, a
      non-positive ``num_steps``.
  """
  config = ClassifierConfig() if config is None else config
  if not isinstance(config, ClassifierConfig):
    raise TypeError(f"config must be a ClassifierConfig, got {type(config).__name__}")
  num_steps = check_int(num_steps, "num_steps", lo=1)
  _check_xy(x, labels, config.num_classes)
  return _train(net, key, jnp.asarray(x, jnp.float32), jnp.asarray(labels), num_steps, config)


@jax.jit
def _features(net: Net, x: jax.Array) -> jax.Array:
  return net.module().features(x)


def features(net: Net, x: Any) -> jax.Array:
  """``(N, hidden[-1])`` penultimate features :math:`f_\\theta(x)` (:meth:`MLP.features`)."""
  if jnp.ndim(x) != 2:
    raise ValueError(f"x must be 2-D (num_samples, in_dim), got shape {jnp.shape(x)}")
  return _features(net, jnp.asarray(x, jnp.float32))


@jax.jit
def _losses(net: Net, x: jax.Array, y: jax.Array) -> jax.Array:
  return optax.softmax_cross_entropy_with_integer_labels(net(x), y)


def per_sample_losses(net: Net, x: Any, labels: Any) -> jax.Array:
  """``(N,)`` cross-entropies :math:`-\\log p_\\theta(y_n \\mid x_n)` (the split's input)."""
  _check_xy(x, labels)
  return _losses(net, jnp.asarray(x, jnp.float32), jnp.asarray(labels))


@jax.jit
def _predict(net: Net, x: jax.Array) -> jax.Array:
  return jnp.argmax(net(x), axis=-1).astype(jnp.int32)


def predict(net: Net, x: Any) -> jax.Array:
  """``(N,)`` argmax classes (int32)."""
  if jnp.ndim(x) != 2:
    raise ValueError(f"x must be 2-D (num_samples, in_dim), got shape {jnp.shape(x)}")
  return _predict(net, jnp.asarray(x, jnp.float32))


class GMMSplit(NamedTuple):
  """The clean / suspect split of :func:`gmm_split` (host NumPy arrays).

  Attributes:
    clean: ``(N,)`` bool, posterior of the low-mean component above the threshold.
    clean_prob: ``(N,)`` that posterior.
    means: ``(2,)`` the components' means, low first.
  """

  clean: np.ndarray
  clean_prob: np.ndarray
  means: np.ndarray


def gmm_split(losses: Any, *, threshold: float = 0.5, seed: int = 0, max_iter: int = 100,
              tol: float = 1e-4, reg_covar: float = 1e-6) -> GMMSplit:
  """Fits a 2-component 1-D Gaussian mixture to per-sample losses; clean = low-mean posterior
  above ``threshold`` (DL4ND step 2, DivideMix's split).

  scikit-learn's ``GaussianMixture`` (EM, k-means initialization seeded by ``seed``), on the
  host in float64: a data-dependent loop of a few dozen EM steps on ``N`` scalars, which is
  not worth a device program.

  Args:
    losses: ``(N,)`` finite per-sample losses, ``N >= 2``.
    threshold: posterior of the low-loss component above which a sample is clean, in (0, 1).
    seed: ``random_state`` of the k-means initialization.
    max_iter, tol, reg_covar: ``GaussianMixture``'s EM settings.

  Raises:
    ValueError: not 1-D, fewer than 2 values, non-finite values, or a bad setting.
  """
  from sklearn.mixture import GaussianMixture

  a = np.asarray(losses, np.float64)
  if a.ndim != 1 or a.size < 2:
    raise ValueError(f"losses must be 1-D with at least 2 values, got shape {a.shape}")
  if not np.all(np.isfinite(a)):
    raise ValueError("losses must be finite")
  threshold = float(check_range(threshold, "threshold", lo=0.0, hi=1.0, lo_open=True,
                                hi_open=True))
  seed = check_int(seed, "seed", lo=0)
  max_iter = check_int(max_iter, "max_iter", lo=1)
  check_range(tol, "tol", lo=0.0, lo_open=True)
  check_range(reg_covar, "reg_covar", lo=0.0)
  gmm = GaussianMixture(2, max_iter=max_iter, tol=float(tol), reg_covar=float(reg_covar),
                        random_state=seed).fit(a[:, None])
  means = gmm.means_[:, 0]
  low = int(np.argmin(means))
  prob = gmm.predict_proba(a[:, None])[:, low]
  return GMMSplit(prob > threshold, prob, np.sort(means))


class Proxies(NamedTuple):
  """Per-(class, domain) feature means.

  Attributes:
    mean: ``(C, D, F)`` :math:`\\bar g_{c,i}` (zeros where a cell has no sample).
    count: ``(C, D)`` samples averaged in each cell (0: the cell is never a candidate).
  """

  mean: jax.Array
  count: jax.Array


def _check_rows(feats: Any, labels: Any, domains: Any, mask: Any, num_classes: int,
                num_domains: int, mask_name: str) -> None:
  if jnp.ndim(feats) != 2:
    raise ValueError(f"features must be 2-D (num_samples, num_features), got "
                     f"{jnp.shape(feats)}")
  n = jnp.shape(feats)[0]
  for name, a, rng in (("labels", labels, num_classes), ("domains", domains, num_domains)):
    if jnp.shape(a) != (n,):
      raise ValueError(f"{name} must have shape ({n},) (one per feature row), got "
                       f"{jnp.shape(a)}")
    if not jnp.issubdtype(jnp.result_type(a), jnp.integer):
      raise TypeError(f"{name} must be integers, got {jnp.result_type(a)}")
    if not isinstance(a, jax.core.Tracer):
      v = np.asarray(a)
      if v.size and (v.min() < 0 or v.max() >= rng):
        raise ValueError(f"{name} must be in [0, {rng - 1}], got {v.min()}..{v.max()}")
  if jnp.shape(mask) != (n,) or jnp.result_type(mask) != jnp.bool_:
    raise ValueError(f"{mask_name} must be a bool array of shape ({n},), got "
                     f"{jnp.result_type(mask)}{list(jnp.shape(mask))}")


@functools.partial(jax.jit, static_argnames=("num_classes", "num_domains"))
def _proxies(feats, labels, domains, mask, num_classes, num_domains) -> Proxies:
  cell = labels * num_domains + domains
  onehot = jax.nn.one_hot(cell, num_classes * num_domains, dtype=feats.dtype) * mask[:, None]
  count = onehot.sum(0)
  total = onehot.T @ feats
  mean = total / jnp.maximum(count, 1.0)[:, None]
  return Proxies(mean.reshape(num_classes, num_domains, -1),
                 count.reshape(num_classes, num_domains).astype(jnp.int32))


def class_domain_proxies(features: Any, labels: Any, domains: Any, mask: Any, *,
                         num_classes: int, num_domains: int) -> Proxies:
  """Mean feature of the rows in ``mask`` for every (class, domain) cell (DL4ND step 3).

  Args:
    features: ``(N, F)`` features.
    labels: ``(N,)`` (noisy) labels in ``[0, num_classes)``.
    domains: ``(N,)`` domains in ``[0, num_domains)``.
    mask: ``(N,)`` bool, the rows that count (the clean ones; all for the ablation).
    num_classes, num_domains: static sizes of the proxy grid.

  Returns:
    :class:`Proxies` ``(C, D, F)`` means and ``(C, D)`` counts.
  """
  num_classes = check_int(num_classes, "num_classes", lo=1)
  num_domains = check_int(num_domains, "num_domains", lo=1)
  _check_rows(features, labels, domains, mask, num_classes, num_domains, "mask")
  return _proxies(jnp.asarray(features, jnp.float32), jnp.asarray(labels), jnp.asarray(domains),
                  jnp.asarray(mask), num_classes, num_domains)


@functools.partial(jax.jit, static_argnames=("mode",))
def _nearest(feats, labels, domains, suspect, mean, count, mode):
  num_domains = mean.shape[1]
  unit = feats / jnp.maximum(jnp.linalg.norm(feats, axis=-1, keepdims=True), 1e-12)
  punit = mean / jnp.maximum(jnp.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
  cos = jnp.einsum("nf,cdf->ncd", unit, punit)  # 1 - cosine distance to every proxy
  same = domains[:, None] == jnp.arange(num_domains)[None, :]  # (N, D)
  allowed = ~same if mode == "cross" else same
  valid = (count > 0)[None] & allowed[:, None, :]  # (N, C, D)
  score = jnp.where(valid, cos, -jnp.inf).reshape(feats.shape[0], -1)
  best = jnp.argmax(score, axis=-1)  # argmin of the cosine distance; ties: the first cell
  found = jnp.any(valid.reshape(feats.shape[0], -1), axis=-1)
  new = jnp.where(suspect & found, best // num_domains, labels).astype(jnp.int32)
  nearest_domain = jnp.where(found, best % num_domains, -1).astype(jnp.int32)
  return new, nearest_domain


def nearest_proxy_labels(features: Any, labels: Any, domains: Any, suspect: Any,
                         proxies: Proxies, *, mode: str = "cross"
                         ) -> tuple[jax.Array, jax.Array]:
  """Relabels every suspect row by its nearest proxy (cosine); the others keep their label.

  ``mode="cross"`` (DL4ND) searches the proxies of every domain but the row's own;
  ``mode="within"`` (the ablation) only those of its own domain. Cells with no sample are
  never candidates; a suspect with no candidate keeps its label.

  Args:
    features: ``(N, F)`` features of the rows.
    labels: ``(N,)`` current labels.
    domains: ``(N,)`` each row's domain.
    suspect: ``(N,)`` bool, the rows to relabel.
    proxies: :class:`Proxies` from :func:`class_domain_proxies`.
    mode: ``"cross"`` or ``"within"``.

  Returns:
    ``(new_labels (N,) int32, nearest_domain (N,) int32)``: the domain of each row's nearest
    candidate proxy (-1 where there is none), computed for every row.
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  if not isinstance(proxies, Proxies):
    raise TypeError(f"proxies must be a Proxies, got {type(proxies).__name__}")
  c, d, f = jnp.shape(proxies.mean)
  _check_rows(features, labels, domains, suspect, c, d, "suspect")
  if jnp.shape(features)[1] != f:
    raise ValueError(f"features have {jnp.shape(features)[1]} columns but the proxies {f}")
  return _nearest(jnp.asarray(features, jnp.float32), jnp.asarray(labels), jnp.asarray(domains),
                  jnp.asarray(suspect), proxies.mean, proxies.count, mode)


class Relabelled(NamedTuple):
  """The output of :func:`relabel`.

  Attributes:
    labels: ``(N,)`` int32 corrected labels (the clean rows' unchanged).
    clean: ``(N,)`` bool, the GMM's clean rows (suspect = ``~clean``).
    clean_prob: ``(N,)`` the low-loss posterior.
    proxies: the :class:`Proxies` used.
  """

  labels: np.ndarray
  clean: np.ndarray
  clean_prob: np.ndarray
  proxies: Proxies


def relabel(features: Any, losses: Any, labels: Any, domains: Any, *, num_classes: int,
            num_domains: int, mode: str = "cross", proxy_set: str = "clean",
            seed: int = 0, threshold: float = 0.5) -> Relabelled:
  """DL4ND's detection and one-shot relabelling: :func:`gmm_split`, then
  :func:`class_domain_proxies` and :func:`nearest_proxy_labels`.

  Args:
    features: ``(N, F)`` features after warm-up.
    losses: ``(N,)`` per-sample losses after warm-up.
    labels: ``(N,)`` the noisy labels.
    domains: ``(N,)`` each row's domain.
    num_classes, num_domains: sizes of the proxy grid.
    mode: ``"cross"`` (DL4ND) or ``"within"`` (ablation).
    proxy_set: ``"clean"`` (DL4ND: proxies from the clean rows) or ``"all"`` (ablation).
    seed, threshold: :func:`gmm_split`'s.

  Returns:
    :class:`Relabelled`.
  """
  if proxy_set not in PROXY_SETS:
    raise ValueError(f"proxy_set must be one of {PROXY_SETS}, got {proxy_set!r}")
  if mode not in MODES:
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
  if jnp.shape(losses) != (jnp.shape(features)[0],):
    raise ValueError(f"losses must have shape ({jnp.shape(features)[0]},) (one per feature "
                     f"row), got {jnp.shape(losses)}")
  split = gmm_split(losses, threshold=threshold, seed=seed)
  mask = split.clean if proxy_set == "clean" else np.ones_like(split.clean)
  proxies = class_domain_proxies(features, labels, domains, jnp.asarray(mask),
                                 num_classes=num_classes, num_domains=num_domains)
  new, _ = nearest_proxy_labels(features, labels, domains, jnp.asarray(~split.clean), proxies,
                                mode=mode)
  return Relabelled(np.asarray(new), split.clean, split.clean_prob, proxies)
