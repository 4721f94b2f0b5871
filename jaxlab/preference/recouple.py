r"""ReCouPLe: reward learning that grounds each preference on the reason given with it.

A per-step encoder maps each step ``x_t`` of a segment to ``z_t`` in an embedding
space shared with fixed reason vectors ``e`` and task vectors ``w``. The reason
attached to a comparison splits every ``z_t`` into its component along ``e`` and
the rest:

.. math::
  z^\parallel_t = \frac{z_t \cdot e}{\|e\|^2}\, e, \qquad z^\perp_t = z_t - z^\parallel_t,
  \qquad R^\parallel(\tau) = \sum_t \langle z^\parallel_t, w\rangle, \quad
  R^\perp(\tau) = \sum_t \langle z^\perp_t, w\rangle,

so the predicted return is ``R = R_par + R_perp = sum_t <z_t, w>``. For a pair
``(tau_a, tau_b)`` with label ``y`` (the probability that ``tau_b`` is
preferred; ``y = 1``: ``tau_b`` wins) and ``BCE(l, y) = -y log sig(l) - (1 - y)
log sig(-l)``, the loss is

.. math::
  L = \mathrm{BCE}(\Delta R^\parallel + \Delta R^\perp, y)
    + \mathrm{BCE}(\Delta R^\parallel - \Delta R^\perp, y)
    + \lambda \sum_{\tau \in \{\tau_a, \tau_b\}}
      \mathbb E \max\Big(0, \frac{|R^\parallel(\tau)|}
        {|R^\parallel(\tau)| + |R^\perp(\tau)| + \epsilon} - \kappa\Big),

``Delta R = R(tau_b) - R(tau_a)``, ``lambda = 0.1``, ``kappa = 0.4``, ``epsilon =
1e-8``. The first term is Bradley-Terry on the total return; the second makes the
reason-aligned part carry the preference and pushes the orthogonal part's
difference towards zero (their gradients in ``Delta R_perp`` cancel at zero); the
third caps the reason-aligned share of each segment's return magnitude at
``kappa``, so the return is not collapsed onto the reason axis. The baseline
(:func:`bt_loss`) is plain Bradley-Terry on ``R = sum_t <z_t, w>`` with the same
encoder and no reason.

What was checked against the official code (``mj-hwang/ReCouPLe``,
``recouple/research/algs/rpl_proj_2bt.py``, class ``RPLProj2BT``, the algorithm
the ``recouple_bt`` configs train): the projection per step with one reason
vector per pair shared by both segments; per-step rewards ``<z_par, w>`` and
``<z_perp, w>`` summed over the segment; logits ``R_b - R_a`` with label 1 when
the second segment is preferred; the second logit is ``Delta R_par - Delta
R_perp`` (a difference of pair differences); the ratio is taken on each
segment's summed returns, not on the pair difference, with ``+1e-8`` in the
denominator and the hinge on the aligned share *above* the threshold; threshold
0.4 (default; ``point4`` configs, with ``point2`` and ``noratio`` ablations) and
weight 0.1; the two segments' penalties are each averaged over the batch and
added; Adam at 3e-4; an MLP encoder (512, 512, ReLU, orthogonal init) of each
step; the task vector is a *fixed* mean-pooled T5-small embedding of the task's
text (``scripts/create_metaworld_comparison_dataset_with_reason.py``), not a
learned per-task head, and reasons are fixed T5 embeddings of short sentences,
so both live in one space with ``z``. The plain Bradley-Terry baseline is the
code's ``MTPIQL`` reward step (same encoder and task vectors, BT only). Inferred
rather than checked: the paper's own equations (the stored copy gave only its
abstract), so the naming ``R_par`` / ``R_perp`` and the loss written above follow
the code. Here the task vector is whatever the caller passes: fixed embeddings as
in the official code, or rows of a learned table.

Example:
  >>> cfg = RecoupleConfig(method="recouple", embed_dim=16, hidden_dims=(64, 64), steps=500)
  >>> encoder = init_encoder(jax.random.key(0), in_dim=8, config=cfg)      # a Net
  >>> encoder, losses = make_fit(cfg, encoder)(encoder, jax.random.key(1), data)
  >>> acc = preference_accuracy(encoder, test.segments_a, test.segments_b, test.tasks,
  ...                           test.labels)
  >>> graphdef, params = encoder      # the older (graphdef, params) calls still work

References:
  Hwang, Korkmaz, Seita, Biyik, "Causally Robust Reward Learning from
  Reason-Augmented Preference Feedback", arXiv:2603.04861, ICLR 2026.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.data.reason_pairs import PreferenceData
from jaxlab.nn import Net
from jaxlab.training.fit import fit as train_fit
from jaxlab.training.fit import minibatch_sampler

METHODS = ("recouple", "bt")


# ----------------------------------------------------------------------------- encoder


class StepEncoder(nnx.Module):
  """Per-step MLP ``x_t -> z_t`` (ReLU, orthogonal init, zero bias, as the official encoder).

  Args:
    in_dim: features per step.
    hidden_dims: hidden widths.
    embed_dim: ``D``, the dimension of the space shared with reason and task vectors.
    rngs: ``nnx.Rngs`` for the initializers.
  """

  def __init__(self, in_dim: int, hidden_dims: Sequence[int], embed_dim: int, *,
               rngs: nnx.Rngs):
    dims = [in_dim, *hidden_dims, embed_dim]
    init = nnx.initializers.orthogonal()
    self.layers = nnx.List([nnx.Linear(a, b, kernel_init=init, rngs=rngs)
                            for a, b in zip(dims[:-1], dims[1:], strict=True)])

  def __call__(self, x: jax.Array) -> jax.Array:
    for layer in self.layers[:-1]:
      x = jax.nn.relu(layer(x))
    return self.layers[-1](x)


# ----------------------------------------------------------------------------- pure maths


def _check_last_dims(z: jax.Array, reason: jax.Array | None, task: jax.Array | None) -> None:
  if z.ndim < 2:
    raise ValueError(f"z must be (..., T, D) per-step embeddings, got shape {z.shape}")
  for name, v in (("reason", reason), ("task", task)):
    if v is None:
      continue
    if v.shape != z.shape[:-2] + z.shape[-1:]:
      raise ValueError(f"{name} must have shape {z.shape[:-2] + z.shape[-1:]} "
                       f"(z's batch dims and D), got {v.shape}")


def _check_pair(z_a: jax.typing.ArrayLike, z_b: jax.typing.ArrayLike,
                labels: jax.typing.ArrayLike) -> tuple[jax.Array, jax.Array, jax.Array]:
  z_a, z_b, labels = jnp.asarray(z_a), jnp.asarray(z_b), jnp.asarray(labels)
  if z_a.shape != z_b.shape or z_a.ndim != 3:
    raise ValueError(f"z_a and z_b must both be (B, T, D), got {z_a.shape}, {z_b.shape}")
  if labels.shape != z_a.shape[:1]:
    raise ValueError(f"labels must be ({z_a.shape[0]},), one per pair, got {labels.shape}")
  return z_a, z_b, labels


def project_onto_reason(z: jax.typing.ArrayLike, reason: jax.typing.ArrayLike
                        ) -> tuple[jax.Array, jax.Array]:
  r"""Splits per-step embeddings along a reason vector.

  .. math:: z^\parallel_t = \frac{z_t \cdot e}{\|e\|^2} e, \qquad z^\perp_t = z_t - z^\parallel_t

  Args:
    z: ``(..., T, D)`` per-step embeddings.
    reason: ``(..., D)`` reason vectors (nonzero; the official code adds no epsilon here).

  Returns:
    ``(z_par, z_perp)``, each shaped like ``z``; ``z_par + z_perp == z`` and
    ``z_perp . reason == 0``.

  Example:
    >>> z_par, z_perp = project_onto_reason(jnp.ones((1, 2, 3)), jnp.array([[1., 0., 0.]]))
  """
  z, reason = jnp.asarray(z), jnp.asarray(reason)
  _check_last_dims(z, reason, None)
  coef = jnp.einsum("...td,...d->...t", z, reason) / jnp.sum(reason * reason, -1)[..., None]
  z_par = coef[..., None] * reason[..., None, :]
  return z_par, z - z_par


def segment_returns(z: jax.typing.ArrayLike, task: jax.typing.ArrayLike) -> jax.Array:
  r"""Predicted return ``R(tau) = sum_t <z_t, w>``.

  Args:
    z: ``(..., T, D)`` per-step embeddings.
    task: ``(..., D)`` task vectors.

  Returns:
    ``(...,)`` returns.
  """
  z, task = jnp.asarray(z), jnp.asarray(task)
  _check_last_dims(z, None, task)
  return jnp.einsum("...td,...d->...", z, task)


def decomposed_returns(z: jax.typing.ArrayLike, reason: jax.typing.ArrayLike,
                       task: jax.typing.ArrayLike) -> tuple[jax.Array, jax.Array]:
  r"""Reason-aligned and reason-orthogonal returns of a segment.

  .. math:: R^\parallel = \sum_t \langle z^\parallel_t, w \rangle, \qquad
            R^\perp = \sum_t \langle z^\perp_t, w \rangle

  Args:
    z: ``(..., T, D)`` per-step embeddings.
    reason: ``(..., D)`` reason vectors.
    task: ``(..., D)`` task vectors.

  Returns:
    ``(R_par, R_perp)``, each ``(...,)``; they add up to :func:`segment_returns`.
  """
  z, reason, task = jnp.asarray(z), jnp.asarray(reason), jnp.asarray(task)
  _check_last_dims(z, reason, task)
  z_par, z_perp = project_onto_reason(z, reason)
  return segment_returns(z_par, task), segment_returns(z_perp, task)


def bce_with_logits(logits: jax.typing.ArrayLike, labels: jax.typing.ArrayLike) -> jax.Array:
  r"""Mean ``BCE(l, y) = -y log sig(l) - (1 - y) log sig(-l)`` (torch's ``BCEWithLogitsLoss``).

  Args:
    logits: ``(B,)`` logits, e.g. ``R(tau_b) - R(tau_a)``.
    labels: ``(B,)`` probabilities that ``tau_b`` is preferred.

  Returns:
    scalar mean loss.
  """
  logits, labels = jnp.asarray(logits), jnp.asarray(labels)
  if logits.shape != labels.shape:
    raise ValueError(f"labels must have the logits' shape {logits.shape}, got {labels.shape}")
  return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype)))


def ratio_penalty(r_par: jax.typing.ArrayLike, r_perp: jax.typing.ArrayLike,
                  threshold: float = 0.4, eps: float = 1e-8) -> jax.Array:
  r"""Hinge on the reason-aligned share of one segment's return magnitude.

  .. math:: \mathbb E\, \max\Big(0, \frac{|R^\parallel|}{|R^\parallel| + |R^\perp| + \epsilon}
            - \kappa\Big)

  Args:
    r_par: ``(B,)`` reason-aligned returns of the segments.
    r_perp: ``(B,)`` reason-orthogonal returns.
    threshold: ``kappa``, the share allowed without penalty (0.4 in the official configs).
    eps: added to the denominator (official: 1e-8).

  Returns:
    scalar mean over the batch.
  """
  r_par, r_perp = jnp.asarray(r_par), jnp.asarray(r_perp)
  if r_par.shape != r_perp.shape:
    raise ValueError(f"r_par and r_perp must have one shape, got {r_par.shape}, {r_perp.shape}")
  share = jnp.abs(r_par) / (jnp.abs(r_par) + jnp.abs(r_perp) + eps)
  return jnp.mean(jax.nn.relu(share - threshold))


def recouple_loss(z_a: jax.typing.ArrayLike, z_b: jax.typing.ArrayLike,
                  reason: jax.typing.ArrayLike, task: jax.typing.ArrayLike,
                  labels: jax.typing.ArrayLike, *, ratio_threshold: float = 0.4,
                  ratio_weight: float = 0.1, eps: float = 1e-8
                  ) -> tuple[jax.Array, dict[str, jax.Array]]:
  r"""The ReCouPLe loss of a batch of pairs (formula in the module docstring).

  .. math::
    L = \mathrm{BCE}(\Delta R^\parallel + \Delta R^\perp, y)
      + \mathrm{BCE}(\Delta R^\parallel - \Delta R^\perp, y)
      + \lambda\,[\mathrm{pen}(\tau_a) + \mathrm{pen}(\tau_b)]

  Args:
    z_a: ``(B, T, D)`` per-step embeddings of the first segments.
    z_b: ``(B, T, D)`` of the second segments.
    reason: ``(B, D)`` the reason given with each pair (shared by both segments).
    task: ``(B, D)`` the task vector of each pair.
    labels: ``(B,)`` probability that ``tau_b`` is preferred (1: ``tau_b`` wins).
    ratio_threshold: ``kappa`` (0.4).
    ratio_weight: ``lambda`` (0.1); 0 gives the official ``noratio`` ablation.
    eps: the ratio's denominator epsilon (1e-8).

  Returns:
    ``(loss, info)`` with ``recouple/bt``, ``recouple/diff``, ``recouple/ratio``
    (the two segments' penalties added), ``recouple/accuracy`` (``R_b > R_a``
    against ``labels > 0.5``) and ``recouple/aligned_accuracy`` (``R_par`` alone).

  Example:
    >>> loss, info = recouple_loss(z_a, z_b, reason, task, labels)
  """
  z_a, z_b, labels = _check_pair(z_a, z_b, labels)
  par_a, perp_a = decomposed_returns(z_a, reason, task)
  par_b, perp_b = decomposed_returns(z_b, reason, task)
  d_par, d_perp = par_b - par_a, perp_b - perp_a
  bt = bce_with_logits(d_par + d_perp, labels)
  diff = bce_with_logits(d_par - d_perp, labels)
  ratio = (ratio_penalty(par_a, perp_a, ratio_threshold, eps)
           + ratio_penalty(par_b, perp_b, ratio_threshold, eps))
  win = labels > 0.5
  info = {"recouple/bt": bt, "recouple/diff": diff, "recouple/ratio": ratio,
          "recouple/accuracy": jnp.mean((d_par + d_perp > 0) == win),
          "recouple/aligned_accuracy": jnp.mean((d_par > 0) == win)}
  return bt + diff + ratio_weight * ratio, info


def bt_loss(z_a: jax.typing.ArrayLike, z_b: jax.typing.ArrayLike, task: jax.typing.ArrayLike,
            labels: jax.typing.ArrayLike) -> tuple[jax.Array, dict[str, jax.Array]]:
  r"""Plain Bradley-Terry reward loss: ``BCE(R(tau_b) - R(tau_a), y)``, ``R = sum_t <z_t, w>``.

  Args:
    z_a: ``(B, T, D)`` per-step embeddings of the first segments.
    z_b: ``(B, T, D)`` of the second segments.
    task: ``(B, D)`` task vectors.
    labels: ``(B,)`` probability that ``tau_b`` is preferred.

  Returns:
    ``(loss, info)`` with ``bt/loss`` and ``bt/accuracy``.
  """
  z_a, z_b, labels = _check_pair(z_a, z_b, labels)
  logits = segment_returns(z_b, task) - segment_returns(z_a, task)
  loss = bce_with_logits(logits, labels)
  return loss, {"bt/loss": loss, "bt/accuracy": jnp.mean((logits > 0) == (labels > 0.5))}


# ----------------------------------------------------------------------------- training


@dataclasses.dataclass(frozen=True)
class RecoupleConfig:
  """Reward-model training settings (official values noted; sizes here are CPU-sized)."""

  method: str = "recouple"  # "recouple" (reason projection) or "bt" (plain Bradley-Terry)
  hidden_dims: tuple[int, ...] = (512, 512)  # encoder widths (official 512, 512)
  embed_dim: int = 512  # D, shared with reason/task vectors (official: T5-small's 512)
  lr: float = 3e-4  # Adam learning rate (official)
  batch_size: int = 256  # pairs per step (official trainer batch)
  steps: int = 1000  # gradient steps (official: 100k reward steps)
  ratio_threshold: float = 0.4  # kappa (official default, "point4")
  ratio_weight: float = 0.1  # lambda (official); 0 = the "noratio" ablation
  eps: float = 1e-8  # ratio denominator epsilon (official)
  log_every: int = 50  # losses are averaged over blocks of this many steps

  def __post_init__(self):
    if self.method not in METHODS:
      raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
    for name in ("embed_dim", "batch_size", "steps", "log_every"):
      v = getattr(self, name)
      if not isinstance(v, int) or v < 1:
        raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not self.hidden_dims or any(not isinstance(h, int) or h < 1 for h in self.hidden_dims):
      raise ValueError(f"hidden_dims must be positive ints, got {self.hidden_dims!r}")
    if not self.lr > 0:
      raise ValueError(f"lr must be > 0, got {self.lr}")
    if not 0 <= self.ratio_threshold <= 1:
      raise ValueError(f"ratio_threshold must be in [0, 1], got {self.ratio_threshold}")
    if self.ratio_weight < 0 or self.eps < 0:
      raise ValueError(f"ratio_weight and eps must be >= 0, got {self.ratio_weight}, {self.eps}")


def _check_config(config: Any) -> None:
  if not isinstance(config, RecoupleConfig):
    raise TypeError(f"config must be a RecoupleConfig, got {type(config).__name__}")


def init_encoder(key: jax.Array, in_dim: int, config: RecoupleConfig) -> Net:
  """A fresh :class:`StepEncoder` as a :class:`~jaxlab.nn.Net`; vmap over keys for many seeds.

  Args:
    key: PRNG key for the initializers.
    in_dim: features per step.
    config: a :class:`RecoupleConfig` (``hidden_dims``, ``embed_dim``).

  Returns:
    The encoder (static graph + parameter pytree). It unpacks as the older pair,
    ``graphdef, params = init_encoder(...)``.
  """
  _check_config(config)
  if not isinstance(in_dim, int) or in_dim < 1:
    raise ValueError(f"in_dim must be a positive int, got {in_dim!r}")
  return Net.create(StepEncoder(in_dim, config.hidden_dims, config.embed_dim,
                                rngs=nnx.Rngs(params=key)))


def _net_or_pair(fn: Callable) -> Callable:
  """Lets ``fn(net, *rest)`` also be called in the older form ``fn(graphdef, params, *rest)``."""

  @functools.wraps(fn)
  def wrapper(net, *args, **kwargs):
    if not isinstance(net, Net):
      if not args:
        raise TypeError(f"{fn.__name__} takes a Net (or the older graphdef, params pair)")
      net, args = Net(graphdef=net, params=args[0]), args[1:]
    return fn(net, *args, **kwargs)

  return wrapper


@_net_or_pair
def embed(net: Net, segments: jax.Array, *, params: Any = None) -> jax.Array:
  """Per-step embeddings ``(..., T, D)`` of segments ``(..., T, F)``.

  Args:
    net: the encoder (the older ``embed(graphdef, params, segments)`` also works).
    segments: ``(..., T, F)`` per-step features.
    params: parameters to use instead of ``net.params``.
  """
  return net(segments, params=params)


@_net_or_pair
def predicted_returns(net: Net, segments: jax.Array, tasks: jax.Array, *, params: Any = None
                      ) -> jax.Array:
  """``R(tau) = sum_t <f(x_t), w>`` for ``(N, T, F)`` segments and ``(N, D)`` task vectors.

  ``net`` is the encoder (or the older ``graphdef, params`` pair as two arguments).
  """
  return segment_returns(embed(net, segments, params=params), tasks)


@_net_or_pair
def preference_accuracy(net: Net, segments_a: jax.Array, segments_b: jax.Array,
                        tasks: jax.Array, labels: jax.Array, num_tasks: int | None = None,
                        *, params: Any = None) -> jax.Array:
  """Fraction of pairs where ``R(tau_b) > R(tau_a)`` agrees with ``labels > 0.5``.

  Args:
    net: the encoder (the older form ``preference_accuracy(graphdef, params,
      segments_a, ...)`` also works).
    segments_a: ``(N, T, F)`` first segments.
    segments_b: ``(N, T, F)`` second segments.
    tasks: ``(N, D)`` task vectors.
    labels: ``(N,)`` probability that ``segments_b`` is preferred.
    num_tasks: if given, the pairs are ``num_tasks`` equal blocks (one per task, in
      order) and the result is each block's accuracy.
    params: parameters to use instead of ``net.params``.

  Returns:
    A scalar, or ``(num_tasks,)`` per-task accuracies.
  """
  d = (predicted_returns(net, segments_b, tasks, params=params)
       - predicted_returns(net, segments_a, tasks, params=params))
  correct = (d > 0) == (jnp.asarray(labels) > 0.5)
  if num_tasks is None:
    return jnp.mean(correct)
  if not isinstance(num_tasks, int) or num_tasks < 1 or correct.shape[0] % num_tasks:
    raise ValueError(f"num_tasks must be a positive int dividing the {correct.shape[0]} "
                     f"pairs, got {num_tasks!r}")
  return jnp.mean(correct.reshape(num_tasks, -1), axis=1)


def loss_fn(params: Any, net: Net | Any, batch: PreferenceData, config: RecoupleConfig
            ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The configured method's loss on a batch: :func:`recouple_loss` or :func:`bt_loss`.

  ``net`` gives the encoder's graph (a :class:`~jaxlab.nn.Net`, or its ``graphdef``);
  the loss is taken at ``params``.
  """
  net = net if isinstance(net, Net) else Net(graphdef=net, params=None)
  z_a = embed(net, batch.segments_a, params=params)
  z_b = embed(net, batch.segments_b, params=params)
  if config.method == "bt":
    return bt_loss(z_a, z_b, batch.tasks, batch.labels)
  return recouple_loss(z_a, z_b, batch.reasons, batch.tasks, batch.labels,
                       ratio_threshold=config.ratio_threshold,
                       ratio_weight=config.ratio_weight, eps=config.eps)


def check_data(data: PreferenceData, config: RecoupleConfig) -> None:
  """Raises ``ValueError`` unless ``data``'s shapes fit each other and ``config.embed_dim``."""
  if not isinstance(data, PreferenceData):
    raise TypeError(f"data must be a PreferenceData, got {type(data).__name__}")
  a, b = data.segments_a, data.segments_b
  if a.ndim != 3 or a.shape != b.shape:
    raise ValueError(f"data.segments_a and segments_b must both be (N, T, F), got {a.shape}, "
                     f"{b.shape}")
  n = a.shape[0]
  if data.labels.shape != (n,):
    raise ValueError(f"data.labels must be ({n},), got {data.labels.shape}")
  for name in ("reasons", "tasks"):
    v = getattr(data, name)
    if v.shape != (n, config.embed_dim):
      raise ValueError(f"data.{name} must be ({n}, embed_dim={config.embed_dim}), got {v.shape}")


def make_fit(config: RecoupleConfig, net: Net | Any
             ) -> Callable[[Any, jax.Array, PreferenceData], tuple[Any, jax.Array]]:
  """Builds ``fit(params, key, data) -> (params, losses)``: Adam on minibatches, one ``scan``.

  Each step draws ``batch_size`` pairs uniformly (with replacement) from ``data``
  and takes an Adam step on :func:`loss_fn` (the shared :func:`jaxlab.training.fit`).
  Pure and jit-able, so many seeds run as ``jax.vmap(fit)(params, keys, data)``. Call
  :func:`check_data` outside jit.

  Args:
    config: a :class:`RecoupleConfig`.
    net: the encoder from :func:`init_encoder` (only its graph is used), or its
      ``graphdef`` (the older form).

  Returns:
    ``fit``; ``losses`` holds the mean loss of each block of ``log_every`` steps,
    ``(steps // log_every,)``. ``fit`` also takes a :class:`~jaxlab.nn.Net` in place
    of ``params`` and then returns the trained :class:`~jaxlab.nn.Net`.
  """
  _check_config(config)
  opt = optax.adam(config.lr)
  n_log = config.steps // config.log_every
  loss = lambda params, batch, _: loss_fn(params, net, batch, config)[0]

  def fit(params: Any, key: jax.Array, data: PreferenceData) -> tuple[Any, jax.Array]:
    start = params.params if isinstance(params, Net) else params
    result = train_fit(loss, opt, start, key, num_steps=config.steps,
                       sample=minibatch_sampler(data, config.batch_size))
    losses = result.losses[:n_log * config.log_every].reshape(n_log, -1).mean(-1)
    trained = result.state.params
    return (params.replace(params=trained) if isinstance(params, Net) else trained), losses

  return fit
