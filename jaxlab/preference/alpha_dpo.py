r"""alpha-DPO and Diffusion-DPO: preference fine-tuning of a diffusion model.

For a pair (preferred ``x_w``, rejected ``x_l``) noised with a *shared* timestep ``t``
and noise ``eps``, the per-sample denoising errors of the policy and of the frozen
reference are

.. math::
  l_w = \tfrac1D\lVert\epsilon_\theta(x_{w,t}, t) - \epsilon\rVert^2,\quad
  l_l = \tfrac1D\lVert\epsilon_\theta(x_{l,t}, t) - \epsilon\rVert^2,\quad
  l^{ref}_w,\ l^{ref}_l \text{ likewise with } \epsilon_{ref},

and both losses are functions of one logit per pair,

.. math::
  z = -\tfrac{\beta}{2}\big[(l_w - l_l) - (l^{ref}_w - l^{ref}_l)\big], \qquad
  p = \sigma(z).

* Diffusion-DPO (Wallace et al.): :math:`L_{DPO} = -\log\sigma(z)`.
* alpha-DPO: :math:`L_\alpha = \dfrac{p^\alpha - \alpha p + \alpha - 1}{\alpha(\alpha - 1)}`.
* Dynamic alpha: after ``warmup_steps`` steps at ``alpha_0``,
  :math:`\alpha = \alpha_0 \cdot \mathrm{sg}\big(\tfrac1B\sum_i p_i\big)`.

Gradients on the logit (with :math:`dp/dz = p(1-p)`):

.. math::
  \frac{\partial L_\alpha}{\partial z} = \frac{(p^\alpha - p)(1 - p)}{\alpha - 1}
  = -(1 - p)\, w_\alpha(p), \quad w_\alpha(p) = \frac{p^\alpha - p}{1 - \alpha} \ge 0,
  \qquad \frac{\partial L_{DPO}}{\partial z} = -(1 - p).

So alpha-DPO is the logistic gradient with a per-pair weight :math:`w_\alpha(p)`; for
``0 < alpha < 1`` the weight vanishes like :math:`p^\alpha/(1-\alpha)` as ``p -> 0``, which
down-weights pairs the model confidently disagrees with (likely mislabelled), and the loss
is bounded by ``1 / alpha``. Near ``p = 1`` it behaves like ``1 - p``, so well-fit pairs are
down-weighted too: the weight peaks at :math:`p = \alpha^{1/(1-\alpha)}` (``1/4`` for
``alpha = 1/2``), i.e. on pairs the model *mildly* disagrees with. What coincides exactly
with Diffusion-DPO:

* at the reference (policy = reference, so ``z = 0`` and ``p = 1/2`` for every pair),
  the parameter gradient of :math:`L_\alpha` is :math:`c_\alpha = (2^{-\alpha} - 1/2)/(1-\alpha)`
  times that of :math:`L_{DPO}` (``c -> ln(2)/2`` as ``alpha -> 1``, ``1/2`` at ``alpha = 0``),
  so with a scale-invariant optimizer (Adam) the first update is the same;
* ``alpha -> 1``: :math:`L_1 = 1 - p + p\log p` (the KL limit), gradient
  :math:`-(1-p)\cdot(-p\log p)`: the logistic gradient times :math:`p\log(1/p)`;
* ``alpha -> 0``: :math:`L_0 = -\log p + p - 1 = L_{DPO} + (p - 1)`, gradient
  :math:`-(1-p)^2`: the logistic one times ``1 - p``, equal to it as ``p -> 0``.

:func:`alpha_loss` evaluates :math:`L_\alpha` in the regrouped form
:math:`\tfrac1\alpha\big[(1-p) + (p^\alpha - p)/(\alpha - 1)\big]`, the middle term as
:math:`p\log p\,(e^x - 1)/x`, :math:`x = (\alpha-1)\log p`, when ``|x|`` is small: the same
function without the float32 cancellation of the textbook form at the official default
``alpha_0 = 0.9999``, defined at ``alpha = 1``, and finite (with finite gradients) for
logits of any size.

What was checked against the official code (``scripts/main.py`` of
github.com/yangli-lab/Diffusion_alpha-DPO_ICLR2026, commit 67e709b): the error is the
mean (not sum) of squared epsilon errors over the latent dims; pairs share ``t`` and the
noise; the logit is ``-0.5 * beta_dpo * (model_diff - ref_diff)``; the loss is the batch
mean of ``(p**a - (1 - a) - a * p) / (a * (a - 1))``; after ``global_step >
reweight_step`` alpha is ``alpha_dpo * mean(sigmoid(logit)).detach()`` (mean over the
batch gathered from all processes), before it ``alpha_dpo``; defaults ``alpha_dpo =
0.9999``, ``beta_dpo = 5000`` (4000 and ``reweight_step = -1``, i.e. dynamic from the
first step, in ``launch/train.sh``); the implicit accuracy counts ``model_diff - ref_diff
< 0`` (``z > 0``). Official ``--reweight_step R`` equals ``warmup_steps = R + 1`` here.
Inferred, not in that repository: the Diffusion-DPO baseline (taken from Wallace et al.'s
paper: ``-log sigmoid`` of the same logit), the gradient identities and limits above, and
the stable rearrangement. (That file also gathers an undefined ``reweight`` whose mean is
never used; it is ignored here.)

Example:
  >>> err = lambda: jax.random.uniform(jax.random.key(0), (8,))
  >>> loss, info = alpha_dpo_loss(err(), err() + 0.1, err(), err(), beta=50.0, alpha=0.5)
  >>> which = loss_params("alpha_dynamic", beta=100.0)       # or "dpo", "alpha"
  >>> policy, metrics = finetune(jax.random.key(1), ref_net, schedule, x_w, x_l, which,
  ...                            FinetuneConfig(steps=300))

References:
  "alpha-DPO: Robust Preference Alignment for Diffusion Models via alpha Divergence",
  ICLR 2026, OpenReview wqbnA6PcKr (authors not listed in the sources consulted; code:
  github.com/yangli-lab/Diffusion_alpha-DPO_ICLR2026), 2026.
  Wallace, Dang, Rafailov, Zhou, Lou, Purushwalkam, Ermon, Xiong, Joty, Naik,
  "Diffusion Model Alignment Using Direct Preference Optimization", CVPR 2024,
  arXiv:2311.12908.
  Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a
  Reward Model", NeurIPS 2023, arXiv:2305.18290.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from jaxlab.core.checks import check_range, concrete
from jaxlab.models.ddpm import Schedule, per_sample_eps_error
from jaxlab.nn import Net
from jaxlab.training.fit import fit as train_fit
from jaxlab.training.fit import minibatch_sampler

LOSSES = ("dpo", "alpha", "alpha_dynamic")
_EXPREL_EPS = 1e-4  # below: exprel by its series
_SERIES_X = 1e-2  # below: the expm1 form of (p^alpha - p) / (alpha - 1)


def _check_beta(beta: Any) -> None:
  check_range(beta, "beta", lo=0.0, lo_open=True, scalar=False)


def _check_alpha(alpha: Any, name: str = "alpha") -> None:
  # only concrete values are checked: a dynamic alpha is traced (alpha = 1 is the KL limit)
  check_range(alpha, name, lo=0.0, lo_open=True, scalar=False)


def _check_errors(*errors: jax.Array) -> None:
  shapes = {jnp.shape(e) for e in errors}
  if len(shapes) != 1 or len(next(iter(shapes))) != 1:
    raise ValueError("err_w, err_l, ref_err_w, ref_err_l must be 1-D arrays of one shape "
                     f"(per-pair errors), got shapes {[jnp.shape(e) for e in errors]}")


def preference_logit(err_w: jax.Array, err_l: jax.Array, ref_err_w: jax.Array,
                     ref_err_l: jax.Array, beta: float) -> jax.Array:
  """``z = -beta/2 [(l_w - l_l) - (l_w^ref - l_l^ref)]`` per pair (Diffusion-DPO's logit).

  Args:
    err_w: ``(B,)`` policy errors on the preferred samples.
    err_l: ``(B,)`` policy errors on the rejected samples.
    ref_err_w: ``(B,)`` reference errors on the preferred samples.
    ref_err_l: ``(B,)`` reference errors on the rejected samples.
    beta: KL strength ``beta > 0``.

  Returns:
    ``(B,)`` logits; ``z > 0`` means the policy favours ``x_w`` more than the reference.
  """
  return -0.5 * beta * ((err_w - err_l) - (ref_err_w - ref_err_l))


def logistic_loss(z: jax.Array) -> jax.Array:
  """Diffusion-DPO's per-pair loss ``-log sigmoid(z)``."""
  return -jax.nn.log_sigmoid(z)


def _alpha_term(log_p: jax.Array, alpha: jax.Array | float) -> jax.Array:
  """``(p^alpha - p) / (alpha - 1)`` from ``log p``, finite for every ``p`` and ``alpha > 0``.

  With ``x = (alpha - 1) log p`` this is ``p log p (e^x - 1) / x``; that form is used for
  ``|x| < 1e-2`` (series near 0, no cancellation near ``alpha = 1``), the direct
  ``(e^{alpha log p} - p) / (alpha - 1)`` elsewhere (no ``inf * 0`` as ``p -> 0``). Both
  branches are kept finite so that ``jnp.where`` passes finite gradients.
  """
  p = jnp.exp(log_p)
  x = (alpha - 1.0) * log_p
  small = jnp.abs(x) < _SERIES_X
  xs = jnp.where(small, x, 0.0)
  tiny = jnp.abs(xs) < _EXPREL_EPS
  xt = jnp.where(tiny, 1.0, xs)
  exprel = jnp.where(tiny, 1.0 + xs / 2 + xs * xs / 6, jnp.expm1(xt) / xt)
  direct = (jnp.exp(alpha * log_p) - p) / jnp.where(small, 1.0, alpha - 1.0)
  return jnp.where(small, p * log_p * exprel, direct)


def alpha_loss(z: jax.Array, alpha: jax.Array | float) -> jax.Array:
  r"""alpha-DPO's per-pair loss :math:`(p^\alpha - \alpha p + \alpha - 1)/(\alpha(\alpha-1))`.

  ``p = sigmoid(z)``. Evaluated as :math:`\tfrac1\alpha[(1-p) + (p^\alpha - p)/(\alpha-1)]`
  from ``log p`` (stable near ``alpha = 1``, equal to the limit ``1 - p + p log p`` there,
  finite for any ``z``).
  Its derivative in ``z`` is :math:`(p^\alpha - p)(1 - p)/(\alpha - 1)`.

  Args:
    z: logits, any shape.
    alpha: ``alpha > 0`` (scalar or broadcastable; may be traced).

  Returns:
    Per-element losses, ``>= 0`` and ``0`` only as ``p -> 1``.
  """
  _check_alpha(alpha)
  # L = [(1 - p) + (p^alpha - p) / (alpha - 1)] / alpha: the textbook numerator regrouped
  return (jax.nn.sigmoid(-z) + _alpha_term(jax.nn.log_sigmoid(z), alpha)) / alpha


def dynamic_alpha(z: jax.Array, alpha0: jax.Array | float, step: jax.Array | int,
                  warmup_steps: jax.Array | int) -> jax.Array:
  """alpha-DPO's schedule: ``alpha0`` for the first ``warmup_steps`` steps, then
  ``alpha0 * mean(sigmoid(z))`` with the gradient stopped.

  Args:
    z: ``(B,)`` logits of the current batch.
    alpha0: ``alpha_0 > 0`` (official default 0.9999; may be traced).
    step: optimizer step, counted from 0 (may be traced).
    warmup_steps: integer ``>= 0``, steps at the fixed ``alpha0`` (official
      ``reweight_step + 1``; may be traced).

  Returns:
    Scalar alpha (no gradient flows through it).
  """
  _check_alpha(alpha0, "alpha0")
  steps = concrete(warmup_steps, "warmup_steps")
  if steps is not None and (not np.issubdtype(steps.dtype, np.integer) or np.any(steps < 0)):
    raise ValueError(f"warmup_steps must be an integer >= 0, got {warmup_steps!r}")
  adaptive = alpha0 * jnp.mean(jax.nn.sigmoid(z))
  return jax.lax.stop_gradient(jnp.where(step < warmup_steps, alpha0, adaptive))


def _info(prefix: str, loss, z, err_w, err_l, ref_err_w, ref_err_l) -> dict[str, jax.Array]:
  return {f"{prefix}/loss": loss, f"{prefix}/p_mean": jnp.mean(jax.nn.sigmoid(z)),
          f"{prefix}/implicit_acc": jnp.mean(z > 0),
          f"{prefix}/model_mse": 0.5 * (jnp.mean(err_w) + jnp.mean(err_l)),
          f"{prefix}/ref_mse": 0.5 * (jnp.mean(ref_err_w) + jnp.mean(ref_err_l))}


def diffusion_dpo_loss(err_w: jax.Array, err_l: jax.Array, ref_err_w: jax.Array,
                       ref_err_l: jax.Array, beta: float) -> tuple[jax.Array, dict]:
  r"""Diffusion-DPO: batch mean of :math:`-\log\sigma(z)`, ``z`` from :func:`preference_logit`.

  Args:
    err_w, err_l: ``(B,)`` policy errors on preferred / rejected samples.
    ref_err_w, ref_err_l: ``(B,)`` reference errors (treated as constants).
    beta: KL strength ``> 0``.

  Returns:
    ``(loss, info)`` with ``dpo/loss``, ``dpo/p_mean``, ``dpo/implicit_acc`` (fraction
    ``z > 0``), ``dpo/model_mse``, ``dpo/ref_mse``.
  """
  _check_errors(err_w, err_l, ref_err_w, ref_err_l)
  _check_beta(beta)
  ref_err_w, ref_err_l = jax.lax.stop_gradient((ref_err_w, ref_err_l))
  z = preference_logit(err_w, err_l, ref_err_w, ref_err_l, beta)
  loss = jnp.mean(logistic_loss(z))
  return loss, _info("dpo", loss, z, err_w, err_l, ref_err_w, ref_err_l)


def alpha_dpo_loss(err_w: jax.Array, err_l: jax.Array, ref_err_w: jax.Array,
                   ref_err_l: jax.Array, beta: float,
                   alpha: jax.Array | float) -> tuple[jax.Array, dict]:
  r"""alpha-DPO: batch mean of :math:`(p^\alpha - \alpha p + \alpha - 1)/(\alpha(\alpha-1))`.

  For the dynamic schedule pass ``alpha = dynamic_alpha(z, alpha0, step, warmup)``.

  Args:
    err_w, err_l: ``(B,)`` policy errors on preferred / rejected samples.
    ref_err_w, ref_err_l: ``(B,)`` reference errors (treated as constants).
    beta: KL strength ``> 0``.
    alpha: ``> 0``; a scalar, possibly traced.

  Returns:
    ``(loss, info)`` with the keys of :func:`diffusion_dpo_loss` under ``alpha_dpo/``
    plus ``alpha_dpo/alpha``.
  """
  _check_errors(err_w, err_l, ref_err_w, ref_err_l)
  _check_beta(beta)
  _check_alpha(alpha)
  ref_err_w, ref_err_l = jax.lax.stop_gradient((ref_err_w, ref_err_l))
  z = preference_logit(err_w, err_l, ref_err_w, ref_err_l, beta)
  loss = jnp.mean(alpha_loss(z, alpha))
  info = _info("alpha_dpo", loss, z, err_w, err_l, ref_err_w, ref_err_l)
  info["alpha_dpo/alpha"] = jnp.asarray(alpha, jnp.float32)
  return loss, info


def sample_pair_noise(key: jax.Array, schedule: Schedule, num_pairs: int,
                      dim: int) -> tuple[jax.Array, jax.Array]:
  """One timestep and one noise draw per pair, shared by its ``w`` and ``l`` samples.

  Args:
    key: PRNG key.
    schedule: the noise schedule (``t`` is uniform on ``[0, T)``).
    num_pairs: ``B``.
    dim: features per sample ``D``.

  Returns:
    ``(t, noise)`` of shapes ``(B,)`` and ``(B, D)``.
  """
  k_t, k_eps = jax.random.split(key)
  return (jax.random.randint(k_t, (num_pairs,), 0, schedule.num_steps),
          jax.random.normal(k_eps, (num_pairs, dim)))


def pair_errors(net: Net, schedule: Schedule, x_w: jax.Array, x_l: jax.Array, t: jax.Array,
                noise: jax.Array, params: Any = None) -> tuple[jax.Array, jax.Array]:
  """Per-pair errors ``(l_w, l_l)`` with the same ``t`` and noise for both members.

  Args:
    net: the noise predictor.
    schedule: the noise schedule.
    x_w, x_l: ``(B, D)`` preferred / rejected samples.
    t: ``(B,)`` timesteps; noise: ``(B, D)`` (from :func:`sample_pair_noise`).
    params: parameters to use instead of ``net.params`` (e.g. the reference's).

  Returns:
    ``(err_w, err_l)``, each ``(B,)``.
  """
  if jnp.shape(x_w) != jnp.shape(x_l) or jnp.ndim(x_w) != 2:
    raise ValueError(f"x_w and x_l must both be (B, D), got {jnp.shape(x_w)} and "
                     f"{jnp.shape(x_l)}")
  return (per_sample_eps_error(net, schedule, x_w, t, noise, params),
          per_sample_eps_error(net, schedule, x_l, t, noise, params))


class LossParams(NamedTuple):
  """Which preference loss and its hyperparameters, as arrays (traced, so vmappable).

  Build with :func:`loss_params`. Holding the choice of loss as data lets one compiled
  fine-tuning loop run Diffusion-DPO and both alpha-DPO variants side by side under
  ``jax.vmap``; the losses differ only in a scalar function of the shared logit.
  """

  kind: jax.Array  # int32 index into LOSSES: 0 dpo, 1 alpha (fixed), 2 alpha_dynamic
  beta: jax.Array  # KL strength
  alpha: jax.Array  # fixed alpha, or alpha_0 of the dynamic schedule
  warmup_steps: jax.Array  # dynamic: steps at alpha_0 before alpha = alpha_0 * mean p


def loss_params(loss: str = "alpha_dynamic", beta: float = 5000.0, alpha: float = 0.9999,
                warmup_steps: int = 0) -> LossParams:
  """Checked :class:`LossParams`; defaults are the official ones.

  Args:
    loss: ``"dpo"`` (Diffusion-DPO), ``"alpha"`` (fixed alpha) or ``"alpha_dynamic"``.
    beta: ``> 0``; the official default 5000 suits SD latents, whose errors differ by
      ~1e-2; small models with larger errors need a much smaller beta.
    alpha: ``> 0``: the fixed alpha or ``alpha_0`` (official default 0.9999). Ignored
      by ``"dpo"``.
    warmup_steps: ``>= 0``; official ``--reweight_step R`` is ``R + 1`` here (the
      launch script's ``R = -1`` gives 0: dynamic from the first step).

  Returns:
    The parameters as float32 / int32 scalars; stack several with ``jax.tree.map``.
  """
  if loss not in LOSSES:
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
  _check_beta(beta)
  _check_alpha(alpha)
  if not isinstance(warmup_steps, int) or warmup_steps < 0:
    raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
  return LossParams(kind=jnp.asarray(LOSSES.index(loss), jnp.int32),
                    beta=jnp.asarray(beta, jnp.float32), alpha=jnp.asarray(alpha, jnp.float32),
                    warmup_steps=jnp.asarray(warmup_steps, jnp.int32))


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
  """Static optimizer settings of :func:`finetune` (hashable: a jit static argument)."""

  steps: int = 500  # optimizer steps
  batch_size: int = 64  # pairs per step
  learning_rate: float = 1e-4  # Adam step size
  max_grad_norm: float = 1.0  # global-norm clip (official default)

  def __post_init__(self):
    for name in ("learning_rate", "max_grad_norm"):
      if not getattr(self, name) > 0:
        raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
    for name in ("steps", "batch_size"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def preference_loss(params: Any, ref_params: Any, net: Net, schedule: Schedule,
                    x_w: jax.Array, x_l: jax.Array, key: jax.Array, step: jax.Array,
                    loss: LossParams) -> tuple[jax.Array, dict]:
  """The selected loss on one batch of pairs (shared ``t``/noise per pair).

  The logit ``z`` is computed once; Diffusion-DPO's and alpha-DPO's per-pair losses are
  both evaluated and ``loss.kind`` selects one (the unselected alpha branch uses
  ``alpha = 1`` so that it stays finite).

  Args:
    params: policy parameters (differentiated).
    ref_params: frozen reference parameters.
    net: graph of the noise predictor (its own params are not used).
    schedule: the noise schedule.
    x_w, x_l: ``(B, D)`` preferred / rejected samples.
    key: PRNG key for ``t`` and the noise.
    step: optimizer step (for the dynamic alpha's warm-up).
    loss: which loss and its hyperparameters (:func:`loss_params`).

  Returns:
    ``(loss, info)`` with ``pref/loss``, ``pref/alpha`` (0 for ``dpo``), ``pref/p_mean``,
    ``pref/implicit_acc``, ``pref/model_mse``, ``pref/ref_mse``.
  """
  t, noise = sample_pair_noise(key, schedule, x_w.shape[0], x_w.shape[1])
  err_w, err_l = pair_errors(net, schedule, x_w, x_l, t, noise, params)
  ref_w, ref_l = jax.lax.stop_gradient(
      pair_errors(net, schedule, x_w, x_l, t, noise, ref_params))
  z = preference_logit(err_w, err_l, ref_w, ref_l, loss.beta)
  dynamic = dynamic_alpha(z, loss.alpha, step, loss.warmup_steps)
  alpha = jnp.select([loss.kind == 1, loss.kind == 2], [loss.alpha, dynamic], 0.0)
  value = jnp.mean(jnp.where(loss.kind == 0, logistic_loss(z),
                             alpha_loss(z, jnp.where(loss.kind == 0, 1.0, alpha))))
  info = {k.replace("dpo/", "pref/"): v
          for k, v in _info("dpo", value, z, err_w, err_l, ref_w, ref_l).items()}
  info["pref/alpha"] = alpha
  return value, info


def finetune(key: jax.Array, net: Net, schedule: Schedule, x_w: jax.Array, x_l: jax.Array,
             loss: LossParams, config: FinetuneConfig = FinetuneConfig(),
             ref_params: Any = None,
             snapshots: int = 0) -> tuple[Net, dict] | tuple[Net, dict, Any]:
  """Fine-tunes a copy of ``net`` on preference pairs; the reference stays frozen.

  One jitted ``lax.scan`` over ``config.steps`` (:func:`jaxlab.training.fit`); each step
  draws ``batch_size`` pairs (with replacement) and a shared ``t``/noise per pair, applies
  :func:`preference_loss`, clips the global gradient norm and takes an Adam step.
  ``jax.vmap`` over ``key``, the data, ``net`` or ``loss`` runs seeds, data sets or
  methods at once under one compilation.

  Args:
    key: PRNG key.
    net: the pretrained noise predictor; the policy starts from ``net.params``.
    schedule: the noise schedule.
    x_w, x_l: ``(N, D)`` preferred / rejected samples (row ``i`` is one pair).
    loss: the loss and its hyperparameters (:func:`loss_params`).
    config: optimizer settings.
    ref_params: the frozen reference (default ``net.params``).
    snapshots: if ``> 0``, also return the parameters after every
      ``steps / snapshots`` steps (``snapshots`` must divide ``steps``).

  Returns:
    ``(policy, metrics)``: the fine-tuned network and per-step ``(steps,)`` arrays of
    the :func:`preference_loss` info (plus ``pref/grad_norm``); with ``snapshots > 0``,
    ``(policy, metrics, params)`` where ``params`` stacks the ``snapshots`` intermediate
    parameter pytrees (the last equals ``policy.params``).
  """
  if not isinstance(loss, LossParams):
    raise TypeError(f"loss must be LossParams (see loss_params), got {type(loss).__name__}")
  if not isinstance(config, FinetuneConfig):
    raise TypeError(f"config must be a FinetuneConfig, got {type(config).__name__}")
  if jnp.shape(x_w) != jnp.shape(x_l) or jnp.ndim(x_w) != 2:
    raise ValueError(f"x_w and x_l must both be (N, D), got {jnp.shape(x_w)} and "
                     f"{jnp.shape(x_l)}")
  if not isinstance(snapshots, int) or snapshots < 0 or (snapshots
                                                         and config.steps % snapshots):
    raise ValueError(f"snapshots must be an int >= 0 dividing steps={config.steps}, "
                     f"got {snapshots!r}")
  ref = net.params if ref_params is None else ref_params
  policy, metrics, params = _finetune(key, net, schedule, x_w, x_l, ref, loss, config=config,
                                      chunks=max(snapshots, 1))
  return (policy, metrics, params) if snapshots else (policy, metrics)


@functools.partial(jax.jit, static_argnames=("config", "chunks"))
def _finetune(key, net, schedule, x_w, x_l, ref_params, loss, *, config, chunks):
  # the optimizer runs on the raveled parameter vector (identical elementwise update and
  # global norm, fewer XLA fusions, so a faster compile)
  flat, unravel = ravel_pytree(net.params)
  opt = optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                    optax.adam(config.learning_rate))
  pairs = minibatch_sampler((x_w, x_l), config.batch_size)
  sample = lambda k, step: (*pairs(k, step), step)  # the step drives the dynamic alpha

  def pref_loss(p, batch, k):
    b_w, b_l, step = batch
    return preference_loss(unravel(p), ref_params, net, schedule, b_w, b_l, k, step, loss)

  result = train_fit(pref_loss, opt, flat, key, num_steps=config.steps, sample=sample,
                     has_aux=True, grad_norm=True, eval_fn=unravel, num_evals=chunks)
  metrics = {**result.metrics.aux, "pref/grad_norm": result.metrics.grad_norm}
  return net.replace(params=unravel(result.state.params)), metrics, result.evals
