r"""ssToken: self-modulated and semantic-aware token selection for supervised fine-tuning.

Not every response token of an SFT sample deserves a gradient. ssToken scores each
response token ``i`` with two signals and trains on the top share per sample:

* **self-modulated** (loss): :math:`\mathrm{REL}_i = \ell^{his}_i - \ell^{cur}_i`, the
  history model's cross-entropy minus the current model's, min-max normalised within
  the sample, :math:`\widetilde{\mathrm{REL}}_i = (\mathrm{REL}_i - \min)/(\max - \min +
  10^{-8})` over the sample's response tokens (tokens the model is still learning score
  high; tokens that neither model predicts, e.g. label noise, score low);
* **semantic-aware** (attention): :math:`\mathrm{Attn}_i = \sum_{j \in \mathrm{prompt}}
  \bar A_{ij}`, the head-mean attention of one layer (default the last) from token ``i``
  to the prompt; a softmax row, so already in ``[0, 1]``.

.. math::
  \mathrm{Score}_i = \gamma\,\widetilde{\mathrm{REL}}_i + (1 - \gamma)\,\mathrm{Attn}_i,

keep the top :math:`\lceil \rho \cdot |\mathrm{resp}| \rceil` tokens of each sample and
train on the mean cross-entropy of the kept tokens (the official code sets the other
labels to -100). Scores carry no gradient.

The history model is the **fixed base model** before SFT (the official code: its
per-token losses precomputed once, :func:`history_losses`), or optionally an EMA of the
trained parameters, :math:`\theta_{his} \leftarrow \alpha\theta_{his} + (1-\alpha)\theta`
with :math:`\alpha = 0.99` (:func:`make_train_step` carries it; ``alpha = 1`` keeps the
base fixed). Defaults: :math:`\rho = 0.6`, :math:`\gamma = 0.5` (paper and code). The
code's warm start, attention only (:math:`\gamma = 0`) until sample index 10000, is
:func:`warm_gamma`: at the first step the current model *is* the base, every REL is 0
and the loss signal cannot rank anything (a tie that a selection by loss alone would
break by position, and then keep reinforcing: only trained tokens improve).

Alignment: ``ce[:, t]`` is the loss of token ``t + 1`` predicted at position ``t``
(:class:`jaxlab.data.lm_tasks.SeqData`'s ``loss_mask`` layout); its attention score is
row ``t + 1`` of the map, the query of token ``t + 1`` itself, as in a Hugging Face model
whose labels are aligned with ``input_ids`` [assumed: the row is not read in code].

Example:
  >>> out = token_losses(net, data.tokens, layer=-1)         # ce (B, T-1), attention rows
  >>> his = history_losses(net, data.tokens)                 # base model, once
  >>> attn = prompt_attention(out.attention, data.prompt_len)
  >>> s = token_scores(his - out.ce, attn, data.loss_mask, gamma=0.5)
  >>> keep = select_top(s, data.loss_mask, rho=0.6)
  >>> loss = selected_loss(out.ce, keep)

Reference:
  "ssToken: Self-modulated and Semantic-aware Token Selection for LLM
  Fine-tuning", arXiv:2510.18250 (ICLR 2026); code jianke0604/ssToken
  (``scripts/finetune.py``: ``filter_tokens_with_attention_loss``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.nn import Net

EPS = 1e-8  # the min-max denominator's epsilon (official code)


@dataclasses.dataclass(frozen=True)
class SSTokenConfig:
  """ssToken's constants (hashable). ``rho`` and ``gamma`` may also be passed traced to
  :func:`sstoken_loss` / :func:`make_train_step` (one program for many arms)."""

  rho: float = 0.6  # share of each sample's response tokens kept
  gamma: float = 0.5  # weight of the loss signal (1 - gamma: attention signal)
  layer: int = -1  # layer whose attention scores the prompt (-1: last)
  ema: float = 0.99  # alpha of the EMA history model (1.0: the fixed base model)

  def __post_init__(self):
    if not isinstance(self.rho, (int, float)) or not 0.0 < self.rho <= 1.0:
      raise ValueError(f"rho must be a number in (0, 1], got {self.rho!r}")
    for name in ("gamma", "ema"):
      v = getattr(self, name)
      if not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {v!r}")
    if not isinstance(self.layer, int) or isinstance(self.layer, bool):
      raise ValueError(f"layer must be an int (negative counts from the last), got "
                       f"{self.layer!r}")


class TokenLosses(NamedTuple):
  """``ce (B, T-1)``: loss of token ``t + 1``; ``attention (B, H, T-1, T)``: the chosen
  layer's attention rows of tokens ``1..T-1`` (None unless asked for)."""

  ce: jax.Array
  attention: jax.Array | None = None


def token_losses(net: Net, tokens: jax.Array, *, params: Any = None,
                 layer: int | None = -1) -> TokenLosses:
  """Per-token cross-entropy of ``tokens (B, T)`` and (``layer`` not None) that layer's
  attention rows, in one forward pass over the whole sequence."""
  module = net.module(params)
  if layer is None:
    logits = module(tokens[:, :-1])
    return TokenLosses(optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]))
  out = module.forward(tokens, return_attention=True)
  ce = optax.softmax_cross_entropy_with_integer_labels(out.logits[:, :-1], tokens[:, 1:])
  return TokenLosses(ce, out.attention[layer][:, :, 1:])


def history_losses(net: Net, tokens: jax.Array, *, params: Any = None,
                   batch_size: int = 256) -> jax.Array:
  """The history (base) model's per-token losses ``(N, T-1)``, computed once in batches."""
  fn = jax.jit(lambda p, x: token_losses(net, x, params=p, layer=None).ce)
  p = net.params if params is None else params
  chunks = [fn(p, tokens[i:i + batch_size]) for i in range(0, tokens.shape[0], batch_size)]
  return jnp.concatenate(chunks, 0)


def minmax_normalize(x: jax.Array, mask: jax.Array) -> jax.Array:
  r"""Per-sample (last axis) :math:`(x - \min)/(\max - \min + 10^{-8})` over ``mask``'s
  positions; 0 elsewhere."""
  m = mask > 0
  lo = jnp.min(jnp.where(m, x, jnp.inf), -1, keepdims=True)
  hi = jnp.max(jnp.where(m, x, -jnp.inf), -1, keepdims=True)
  return jnp.where(m, (x - lo) / (hi - lo + EPS), 0.0)


def prompt_attention(attention: jax.Array, prompt_len: int | jax.Array) -> jax.Array:
  r""":math:`\mathrm{Attn}_i = \sum_{j < \text{prompt\_len}} \mathrm{mean}_h A_{h,i,j}` from
  attention rows ``(B, H, T', S)``: ``(B, T')``. ``prompt_len`` may be per sample ``(B,)``."""
  cols = jnp.arange(attention.shape[-1]) < jnp.reshape(jnp.asarray(prompt_len), (-1, 1, 1))
  return jnp.sum(jnp.where(cols, attention.mean(1), 0.0), -1)


def token_scores(rel: jax.Array, attn: jax.Array, mask: jax.Array,
                 gamma: float | jax.Array = 0.5) -> jax.Array:
  r""":math:`\gamma\,\widetilde{\mathrm{REL}} + (1-\gamma)\,\mathrm{Attn}` on the response
  tokens (``mask``), 0 elsewhere."""
  return jnp.where(mask > 0, gamma * minmax_normalize(rel, mask) + (1 - gamma) * attn, 0.0)


def select_top(scores: jax.Array, mask: jax.Array, rho: float | jax.Array = 0.6) -> jax.Array:
  r"""Float mask of each sample's top :math:`\lceil \rho \cdot |\mathrm{resp}| \rceil`
  response tokens by score (ties: the earlier position)."""
  m = mask > 0
  k = jnp.ceil(rho * jnp.sum(m, -1, keepdims=True) - 1e-6)  # guard 0.6 * 10 = 6.0000001
  order = jnp.argsort(-jnp.where(m, scores, -jnp.inf), -1, stable=True)
  rank = jnp.argsort(order, -1)
  return (m & (rank < k)).astype(jnp.float32)


def warm_gamma(step: jax.Array, gamma: float | jax.Array,
               warmup_steps: int | jax.Array) -> jax.Array:
  """The official warm start: ``gamma = 0`` (attention only) for the first
  ``warmup_steps`` steps, ``gamma`` after."""
  return jnp.where(step < warmup_steps, 0.0, gamma)


def selected_loss(ce: jax.Array, keep: jax.Array) -> jax.Array:
  """Mean cross-entropy over the kept tokens (the labels not set to -100)."""
  return jnp.sum(ce * keep) / jnp.maximum(jnp.sum(keep), 1.0)


def sstoken_loss(net: Net, params: Any, tokens: jax.Array, mask: jax.Array,
                 history_ce: jax.Array, prompt_len: int | jax.Array, *,
                 rho: float | jax.Array = 0.6, gamma: float | jax.Array = 0.5,
                 layer: int = -1, random_scores: jax.Array | None = None,
                 use_random: bool | jax.Array = False) -> tuple[jax.Array, dict]:
  """ssToken's training loss on a batch, and diagnostics.

  Args:
    net: the model (a :class:`jaxlab.nn.Net` holding a transformer).
    params: the current parameters (differentiated).
    tokens: ``(B, T)`` ids; ``mask (B, T-1)`` marks the response tokens.
    history_ce: ``(B, T-1)`` the history model's per-token losses.
    prompt_len: prompt length (int or ``(B,)``).
    rho, gamma: keep share and loss-signal weight (may be traced).
    layer: the attention layer.
    random_scores, use_random: with ``use_random`` (may be traced) the selection uses
      ``random_scores (B, T-1)`` instead: the random-selection baseline.

  Returns:
    ``(loss, info)``: ``info["keep"] (B, T-1)`` is the selection, ``kept`` its share of
    the response, ``attn`` / ``rel`` the mean signals; ``rho = 1`` keeps every response
    token (full SFT).
  """
  out = token_losses(net, tokens, params=params, layer=layer)
  ce = jax.lax.stop_gradient(out.ce)
  attn = prompt_attention(jax.lax.stop_gradient(out.attention), prompt_len)
  scores = token_scores(history_ce - ce, attn, mask, gamma)
  if random_scores is not None:
    scores = jnp.where(use_random, random_scores, scores)
  keep = select_top(scores, mask, rho)
  info = {"keep": keep, "kept": jnp.sum(keep) / jnp.maximum(jnp.sum(mask), 1.0),
          "attn": jnp.sum(attn * mask) / jnp.maximum(jnp.sum(mask), 1.0),
          "rel": jnp.sum((history_ce - ce) * mask) / jnp.maximum(jnp.sum(mask), 1.0)}
  return selected_loss(out.ce, keep), info


class SSTokenState(struct.PyTreeNode):
  """Parameters, optimizer state and the history model's parameters."""

  params: Any
  opt_state: Any
  history: Any


def make_train_step(net: Net, optimizer: optax.GradientTransformation, prompt_len: int, *,
                    layer: int = -1):
  """``step(state, batch, arm) -> (state, metrics)`` with ``batch = (tokens, mask,
  random_scores)`` and ``arm = dict(rho, gamma, use_random, alpha)`` (all may be traced:
  one compiled program for full SFT (``rho = 1``), random, loss-only (``gamma = 1``),
  attention-only (``gamma = 0``), ssToken and the EMA history (``alpha < 1``)).

  The history losses are the history parameters' forward pass on the batch; with
  ``alpha = 1`` those are the base model's, i.e. :func:`history_losses` computed per
  batch instead of once (the same numbers, one more forward pass per step). After the
  update ``history <- alpha history + (1 - alpha) params``.
  """
  if not isinstance(prompt_len, int) or isinstance(prompt_len, bool) or prompt_len < 1:
    raise ValueError(f"prompt_len must be a positive int, got {prompt_len!r}")

  def step(state: SSTokenState, batch, arm):
    tokens, mask, noise = batch
    his = jax.lax.stop_gradient(token_losses(net, tokens, params=state.history, layer=None).ce)
    loss_fn = lambda p: sstoken_loss(net, p, tokens, mask, his, prompt_len,  # noqa: E731
                                     rho=arm["rho"], gamma=arm["gamma"], layer=layer,
                                     random_scores=noise, use_random=arm["use_random"])
    (loss, info), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    a = arm["alpha"]
    history = jax.tree.map(lambda h, p: a * h + (1 - a) * p, state.history, params)
    return SSTokenState(params, opt_state, history), {"loss": loss, **info}

  return step
