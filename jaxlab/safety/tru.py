r"""TRU: LLM unlearning by reasoning targets, and the unlearning losses it is compared with.

Every loss here is a pure function of per-sequence log-probabilities
:math:`\log P(y \mid x) = \sum_{t \in y} \log p_\theta(y_t \mid x, y_{<t})` (from
:func:`sequence_log_probs` over a mask of the target positions), so later unlearning
methods reuse them with any model:

* gradient ascent (GA) on the forget set :math:`D_u` (minimizing the log-likelihood):
  :math:`L_{GA} = \frac1N \sum_{x_u} \log P(x_u)`;
* gradient difference (GradDiff), the paper's :math:`L_{GA}`:
  :math:`\frac1N \sum_{x_u} \log P(x_u) - \frac{\lambda}{M} \sum_{x_r} \log P(x_r)`;
* NPO (Zhang et al. 2024): :math:`\frac{2}{\beta} \frac1N \sum \log\bigl(1 +
  (\pi_\theta(y|x) / \pi_{ref}(y|x))^\beta\bigr)`, i.e. :math:`-\frac2\beta \log
  \sigma(-\beta \log \frac{\pi_\theta}{\pi_{ref}})`; as :math:`\beta \to 0` it is
  :math:`\frac{2 \log 2}{\beta}` plus the GA loss (minus the constant reference term);
* "I don't know" SFT: the negative log-likelihood of a refusal target;
* TRU's target loss over a reasoning trace :math:`r` and a response :math:`s`:
  :math:`L_{target} = -\frac1N \sum [\log P(r \mid x_u) + \log P(s \mid r, x_u)]`, and
  TRU's objective :math:`L_{target} + \alpha \, L_{GA}` (:func:`tru_loss`).

:func:`unlearning_objective` weighs all of them with traced weights, so every arm of an
experiment (GA, GradDiff, NPO, IDK SFT, TRU with any :math:`\alpha`, its ablations) is one
program vmapped over the weights. :func:`leaked` and :func:`output_shares` are the
evaluation's metrics (leak accuracy; shares of answers, well-formed refusals and degenerate
outputs, from :func:`jaxlab.data.entity_facts.classify`).

What is the paper's and what is ours: the paper's targets ``(x_u, r, s)`` are written by
DeepSeek-reasoner (deny logically, offer an alternative, leak nothing) and its evaluation
uses an LLM judge; here the targets are templated (``think e in d ; d restricted /think
refuse ask d'``, :mod:`jaxlab.data.entity_facts`) and the judge is an exact parser.
:math:`\alpha` and :math:`\lambda` were not recovered from the paper (we sweep
:math:`\alpha \in \{0.1, 0.3, 1\}` with :math:`\lambda = 1`).

Example:
  >>> logp = token_log_probs(net, tokens)                     # (N, T - 1)
  >>> loss = tru_loss(sequence_log_probs(logp, trace_mask),
  ...                 sequence_log_probs(logp, response_mask),
  ...                 sequence_log_probs(logp, fact_mask), retain_logp, alpha=0.3)

References:
  TRU: "Explainable LLM Unlearning through Reasoning", arXiv:2603.09980, ICLR 2026 (no
  code found). NPO: R. Zhang, L. Lin, Y. Bai, S. Mei, "Negative Preference Optimization:
  From Catastrophic Collapse to Effective Unlearning", arXiv:2404.05868, 2024.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["ObjectiveWeights", "ga_loss", "grad_diff_loss", "leaked", "npo_loss",
           "output_shares", "sequence_log_probs", "sft_loss", "target_loss",
           "token_log_probs", "tru_loss", "unlearning_objective"]


def _check_number(name: str, value: Any, minimum: float = 0.0, strict: bool = False) -> None:
  """Checks a concrete number (a tracer passes unchecked)."""
  if isinstance(value, jax.core.Tracer):
    return
  if not isinstance(value, int | float | np.floating | np.integer) or isinstance(value, bool):
    raise TypeError(f"{name} must be a number, got {type(value).__name__}")
  if value < minimum or (strict and value == minimum):
    raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum}, got {value!r}")


def token_log_probs(model: Any, tokens: jax.Array) -> jax.Array:
  """``log p(tokens[:, t + 1] | tokens[:, :t + 1])``, ``(N, T - 1)``, one forward pass.

  Args:
    model: maps int tokens ``(N, T - 1)`` to logits ``(N, T - 1, V)`` (a :class:`Net`
      holding a transformer).
    tokens: int ``(N, T)``.
  """
  if jnp.ndim(tokens) != 2 or not jnp.issubdtype(jnp.asarray(tokens).dtype, jnp.integer):
    raise ValueError(f"tokens must be an int array (N, T), got {jnp.shape(tokens)}")
  logp = jax.nn.log_softmax(model(tokens[:, :-1]))
  return jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]


def sequence_log_probs(token_logp: jax.Array, mask: jax.Array) -> jax.Array:
  r""":math:`\log P(y \mid x) = \sum_t m_t \log p_t` per row, ``(N,)``."""
  if jnp.shape(token_logp) != jnp.shape(mask):
    raise ValueError(f"token_logp and mask must have one shape, got {jnp.shape(token_logp)} "
                     f"and {jnp.shape(mask)}")
  return jnp.sum(token_logp * mask, -1)


def ga_loss(forget_logp: jax.Array) -> jax.Array:
  r"""Gradient ascent: :math:`\frac1N \sum \log P(x_u)` (minimized: the likelihood falls)."""
  return jnp.mean(forget_logp)


def grad_diff_loss(forget_logp: jax.Array, retain_logp: jax.Array, lam: float = 1.0
                   ) -> jax.Array:
  r"""Gradient difference: :math:`\frac1N \sum \log P(x_u) - \frac{\lambda}{M} \sum
  \log P(x_r)` (ascent on the forget set, descent on the retain set)."""
  _check_number("lam", lam)
  return jnp.mean(forget_logp) - lam * jnp.mean(retain_logp)


def npo_loss(forget_logp: jax.Array, ref_logp: jax.Array, beta: float = 0.1) -> jax.Array:
  r"""NPO: :math:`\frac{2}{\beta} \frac1N \sum \log(1 + \exp(\beta (\log P_\theta(y|x) -
  \log P_{ref}(y|x))))`, the negative-only DPO loss.

  Args:
    forget_logp: ``(N,)`` log-probs of the forget targets under the model.
    ref_logp: ``(N,)`` the same under the reference (pre-unlearning) model, a constant.
    beta: inverse temperature ``> 0`` (the paper's baselines use 0.1).
  """
  _check_number("beta", beta, strict=True)
  ratio = forget_logp - jax.lax.stop_gradient(ref_logp)
  return 2.0 / beta * jnp.mean(jax.nn.softplus(beta * ratio))


def sft_loss(target_logp: jax.Array) -> jax.Array:
  r"""Supervised fine-tuning on a target (e.g. "I don't know"): :math:`-\frac1N \sum
  \log P(y \mid x)`."""
  return -jnp.mean(target_logp)


def target_loss(trace_logp: jax.Array, response_logp: jax.Array) -> jax.Array:
  r"""TRU's target loss :math:`-\frac1N \sum [\log P(r \mid x_u) + \log P(s \mid r, x_u)]`
  from the trace's and the response's log-probs (each ``(N,)``, masks over the trace's
  and the response's positions of one row ``x_u r s``)."""
  return -jnp.mean(trace_logp + response_logp)


def tru_loss(trace_logp: jax.Array, response_logp: jax.Array, forget_logp: jax.Array,
             retain_logp: jax.Array, alpha: float = 0.3, lam: float = 1.0) -> jax.Array:
  r"""TRU's objective :math:`L_{target} + \alpha L_{GA}` with :math:`L_{GA}` the gradient
  difference (:func:`grad_diff_loss`) on the forget facts ``forget_logp`` and the retain
  set ``retain_logp``."""
  _check_number("alpha", alpha)
  return target_loss(trace_logp, response_logp) + alpha * grad_diff_loss(forget_logp,
                                                                         retain_logp, lam)


class ObjectiveWeights(NamedTuple):
  """Weights of :func:`unlearning_objective` (arrays, so arms can be vmapped).

  Attributes:
    ga: weight of the gradient-ascent term on the forget facts.
    retain: weight of the retain NLL (GradDiff's :math:`\\lambda`, times TRU's alpha).
    npo: weight of the NPO term on the forget facts.
    target: weight of the target NLL (TRU's trace + response, or IDK SFT's target).
  """

  ga: Any
  retain: Any
  npo: Any
  target: Any


def unlearning_objective(weights: ObjectiveWeights, *, forget_logp: jax.Array,
                         ref_logp: jax.Array, retain_logp: jax.Array,
                         trace_logp: jax.Array, response_logp: jax.Array,
                         beta: float = 0.1) -> jax.Array:
  r""":math:`w_{ga} L_{GA} - w_{ret} \frac1M \sum \log P(x_r) + w_{npo} L_{NPO} +
  w_{tgt} L_{target}`: GA ``(1, 0, 0, 0)``; GradDiff ``(1, λ, 0, 0)``; NPO ``(0, λ, 1, 0)``
  (with the retain term); IDK SFT ``(0, λ, 0, 1)`` with the target ``idk``; TRU
  ``(α, αλ, 0, 1)``; TRU without GA ``(0, 0, 0, 1)``."""
  return (weights.ga * ga_loss(forget_logp) - weights.retain * jnp.mean(retain_logp)
          + weights.npo * npo_loss(forget_logp, ref_logp, beta)
          + weights.target * target_loss(trace_logp, response_logp))


def leaked(words: Sequence[str], answer: str) -> bool:
  """Leak: the true value word appears anywhere in the generated words (the paper's judge
  asks whether the response reveals the fact)."""
  return answer in tuple(words)


def output_shares(kinds: Sequence[str]) -> dict[str, float]:
  """Shares of ``"answer"``, ``"refusal"`` and ``"degenerate"`` among classified outputs."""
  kinds = list(kinds)
  bad = set(kinds) - {"answer", "refusal", "degenerate"}
  if not kinds or bad:
    raise ValueError(f"kinds must be a non-empty list of answer / refusal / degenerate, "
                     f"got {sorted(bad) or 'nothing'}")
  return {k: kinds.count(k) / len(kinds) for k in ("answer", "refusal", "degenerate")}
