r"""ASGuard: head attribution, per-head scaling vectors and preventive fine-tuning.

The pieces, each a pure function of a :class:`~jaxlab.nn.Net` holding a toolkit
:class:`~jaxlab.models.transformer.Transformer`:

* :func:`integrated_gradients`: :math:`\mathrm{IG}_i = (x_i - x'_i) \frac1m \sum_{k}
  \partial_i f(x' + \frac{k - 1/2}{m}(x - x'))` (midpoint rule), whose sum tends to
  :math:`f(x) - f(x')` (completeness);
* :func:`head_attribution`: IG over per-head gates :math:`g \in [0, 1]^{L \times H}` (the
  transformer's ``head_scale``) of the mean refusal log-probability
  :math:`\log P(y_{safe} \mid x)`, from all heads off (``g = 0``) to all on (``g = 1``);
* :func:`eap_ig_heads`: the paper's EAP-IG score at head level, :math:`(z_h - z'_h) \cdot
  \frac1m \sum_k \partial f / \partial z_h` with the gradient at interpolated input
  embeddings between a corrupted (past-tense) and a clean (present-tense) prompt;
* :func:`head_outputs` / :func:`patching_effects`: activation patching through the toolkit's
  self-attention hook: run a corrupted prompt with one head's pre-``W_O`` output replaced by
  its output on the clean prompt, and measure the change of the refusal log-probability;
* :func:`vulnerable_heads`: the paper's :math:`H_{vuln}`: the top-``k`` heads of the
  "refused in present, complied in past" attribution that are not among the top-``k`` heads of
  the "refused in both tenses" attribution;
* scaling vectors :math:`H'_j = H_j \odot s_j`, :math:`s_j \in \mathbb{R}^{d_{head}}`
  initialised to 1 (:func:`scales_to_head_scale`, the paper's pre-``W_O`` version, folded by
  :func:`fold_head_scale` as :math:`W'_O = \mathrm{diag}(s) W_O`), and the official code's
  post-projection version, which scales the attention block's output channels after
  ``o_proj`` (:func:`fold_post_scale`);
* :func:`safe_nll`: :math:`-\log P(y_{safe} \mid x)` over the response tokens, the loss of
  both the scale training (only ``s`` trained) and preventive fine-tuning (``s`` frozen, the
  weights trained, then ``s`` unloaded);
* the metrics (:func:`classify`, :func:`rates`): attack success rate, over-refusal, accuracy.

What is the paper's and what is ours: the paper's attribution is EAP-IG edge attribution with
a KL objective on Llama-3.1-8B circuits (its circuit code is not released); here attribution
is head-level IG on the refusal log-probability (the issue's choice), checked against
activation patching. The paper trains ``s`` with AdamW (lr 5e-2, 3 epochs, batch 1) and
preventive fine-tuning with AdamW8bit (lr 9e-6, 1 epoch); we use Adam with rates and step
counts sized for a tiny model trained from scratch. The refusal target is a templated
``sorry cannot`` in place of "I'm sorry, but I cannot fulfill that request.".

Example:
  >>> attr = head_attribution(net, tokens, target_mask, steps=16)        # (L, H)
  >>> heads = vulnerable_heads(attr_flip, attr_always, k=3)              # [(layer, head)]
  >>> hs = scales_to_head_scale(s, heads, cfg)                           # (L, H, D)
  >>> loss = safe_nll(net, tokens, target_mask, head_scale=hs)

References:
  ASGuard: "ASGuard: Activation-Scaling Guard to Mitigate Targeted Jailbreaking Attack",
  arXiv:2509.25843, ICLR 2026; code github.com/dmis-lab/ASGuard (``train_sv.py``,
  ``train_pft.py``, ``model.py``). Integrated gradients: M. Sundararajan, A. Taly, Q. Yan,
  "Axiomatic Attribution for Deep Networks", ICML 2017.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.models.transformer import attention, init_cache
from jaxlab.nn import Net
from jaxlab.safety import tru

__all__ = ["classify", "eap_ig_heads", "fold_head_scale", "fold_post_scale", "head_attribution",
           "head_outputs", "integrated_gradients", "patching_effects", "rates", "safe_nll",
           "scales_to_head_scale", "vulnerable_heads"]


def _check_tokens(tokens: Any, mask: Any = None) -> None:
  if jnp.ndim(tokens) != 2 or not jnp.issubdtype(jnp.asarray(tokens).dtype, jnp.integer):
    raise ValueError(f"tokens must be an int array (N, T), got shape {jnp.shape(tokens)}")
  if mask is not None and jnp.shape(mask) != (jnp.shape(tokens)[0], jnp.shape(tokens)[1] - 1):
    raise ValueError(f"target_mask must have shape (N, T - 1) = "
                     f"{(jnp.shape(tokens)[0], jnp.shape(tokens)[1] - 1)}, got {jnp.shape(mask)}")


def _check_steps(steps: Any) -> None:
  if not isinstance(steps, int | np.integer) or isinstance(steps, bool) or steps < 1:
    raise ValueError(f"steps must be a positive int, got {steps!r}")


def integrated_gradients(f: Callable[[jax.Array], jax.Array], x: jax.Array,
                         baseline: jax.Array, steps: int = 32) -> jax.Array:
  r"""Integrated gradients of a scalar ``f`` along the straight path from ``baseline`` to
  ``x`` (midpoint rule with ``steps`` points): same shape as ``x``; the sum tends to
  ``f(x) - f(baseline)`` (exact when the gradient is affine along the path)."""
  _check_steps(steps)
  x, baseline = jnp.asarray(x, jnp.float32), jnp.asarray(baseline, jnp.float32)
  if x.shape != baseline.shape:
    raise ValueError(f"x and baseline must have one shape, got {x.shape} and {baseline.shape}")
  alphas = (jnp.arange(steps, dtype=jnp.float32) + 0.5) / steps
  grads = jax.vmap(lambda a: jax.grad(f)(baseline + a * (x - baseline)))(alphas)
  return (x - baseline) * jnp.mean(grads, 0)


def safe_nll(net: Net, tokens: jax.Array, target_mask: jax.Array, *,
             head_scale: jax.Array | None = None) -> jax.Array:
  r""":math:`-\frac1N \sum \log P(y_{safe} \mid x)` over the positions of ``target_mask``
  ``(N, T - 1)`` (the response tokens), with an optional ``head_scale`` (the toolkit's
  pre-``W_O`` per-head scale, ``(L, H, 1)`` or ``(L, H, head_dim)``)."""
  logits = net.module().forward(tokens[:, :-1], head_scale=head_scale).logits
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)[..., 0]
  return tru.sft_loss(tru.sequence_log_probs(logp, target_mask))


def head_attribution(net: Net, tokens: jax.Array, target_mask: jax.Array,
                     steps: int = 16) -> jax.Array:
  r"""Head-level IG ``(L, H)`` of the mean target log-probability (e.g. of the refusal),
  over per-head gates from all heads off to all heads on; the entries sum to about
  :math:`f(\text{all on}) - f(\text{all off})`."""
  _check_tokens(tokens, target_mask)
  _check_steps(steps)
  return _head_attribution(net, jnp.asarray(tokens), jnp.asarray(target_mask, jnp.float32),
                           int(steps))


@functools.partial(jax.jit, static_argnums=3)
def _head_attribution(net, tokens, target_mask, steps):
  cfg = net.module().cfg
  f = lambda g: -safe_nll(net, tokens, target_mask, head_scale=g[..., None])  # noqa: E731
  shape = (cfg.num_layers, cfg.num_heads)
  return integrated_gradients(f, jnp.ones(shape), jnp.zeros(shape), steps)


def _patch_hook(q, k, v, *, mask, bias, start, state):
  """Self-attention that records every head's output, replaces the heads chosen by
  ``state = (patch (B, T, H, D), use (H,), delta (B, T, H, D))`` with ``patch`` and adds
  ``delta`` (zero: a point to take gradients with respect to the heads' outputs at)."""
  del start
  y = attention(q, k, v, mask=mask, bias=bias)
  patch, use, delta = state
  return jnp.where(use[None, None, :, None], patch, y) + delta, y


def head_outputs(net: Net, tokens: jax.Array | None, patch: jax.Array | None = None,
                 use: jax.Array | None = None, *, delta: jax.Array | None = None,
                 embeddings: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
  """One forward pass through the self-attention hook: returns the logits ``(B, T, V)`` and
  every head's pre-``W_O`` output ``(L, B, T, H, D)``; with ``patch`` (same shape as those
  outputs) and boolean ``use (L, H)``, the chosen heads' outputs are replaced by ``patch``
  (activation patching; later layers see the patched stream); ``delta`` (same shape) is
  added to every head's output; ``embeddings (B, T, d_model)`` replace ``tokens`` (None)."""
  module = net.module()
  cfg = module.cfg
  if embeddings is None:
    _check_tokens(tokens)
    b, t = tokens.shape
  else:
    b, t = jnp.shape(embeddings)[:2]
  shape = (cfg.num_layers, b, t, cfg.num_heads, cfg.head_dim)
  if patch is None:
    patch, use = jnp.zeros(shape), jnp.zeros((cfg.num_layers, cfg.num_heads), bool)
  elif use is None or jnp.shape(patch) != shape or jnp.shape(use) != shape[:1] + shape[3:4]:
    raise ValueError(f"patch must be {shape} with use (L, H), got {jnp.shape(patch)} and "
                     f"{None if use is None else jnp.shape(use)}")
  delta = jnp.zeros(shape) if delta is None else jnp.asarray(delta)
  if delta.shape != shape:
    raise ValueError(f"delta must be {shape}, got {delta.shape}")
  cache = init_cache(cfg, b, t)
  out = module.forward(tokens, embeddings=embeddings, cache=cache, attend=_patch_hook,
                       attend_state=(jnp.asarray(patch), jnp.asarray(use, bool), delta))
  return out.logits, out.attend_state


def eap_ig_heads(net: Net, clean: jax.Array, corrupt: jax.Array, target_mask: jax.Array,
                 steps: int = 16) -> jax.Array:
  r"""EAP-IG node scores per head ``(L, H)`` (the paper's attribution at head level):
  :math:`(z_h - z'_h) \cdot rac1m \sum_k \partial f / \partial z_h`, the gradient taken at
  the input embeddings :math:`e' + rac{k - 1/2}{m}(e - e')` between the ``corrupt``
  (:math:`e'`, e.g. past tense) and the ``clean`` (:math:`e`, present tense) rows, with
  :math:`z, z'` the heads' pre-``W_O`` outputs on the two and :math:`f` the mean target
  log-probability of the clean rows' continuation (the paper's objective is a KL
  divergence; the issue's is the refusal log-probability)."""
  _check_tokens(clean, target_mask)
  _check_tokens(corrupt, target_mask)
  _check_steps(steps)
  if clean.shape != corrupt.shape:
    raise ValueError(f"clean and corrupt must have one shape, got {clean.shape} and "
                     f"{corrupt.shape}")
  return _eap_ig(net, jnp.asarray(clean), jnp.asarray(corrupt),
                 jnp.asarray(target_mask, jnp.float32), int(steps))


@functools.partial(jax.jit, static_argnums=4)
def _eap_ig(net, clean, corrupt, target_mask, steps):
  module = net.module()
  e, e0 = module.embed(clean[:, :-1]), module.embed(corrupt[:, :-1])
  _, z = head_outputs(net, clean[:, :-1])
  _, z0 = head_outputs(net, corrupt[:, :-1])

  def f(delta, a):
    logits, _ = head_outputs(net, None, delta=delta, embeddings=e0 + a * (e - e0))
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), clean[:, 1:, None], -1)[..., 0]
    return jnp.mean(tru.sequence_log_probs(logp, target_mask))

  alphas = (jnp.arange(steps, dtype=jnp.float32) + 0.5) / steps
  grads = jax.vmap(lambda a: jax.grad(f)(jnp.zeros_like(z), a))(alphas)
  return jnp.sum((z - z0) * jnp.mean(grads, 0), axis=(1, 2, 4))


def patching_effects(net: Net, clean: jax.Array, corrupt: jax.Array,
                     target_mask: jax.Array) -> jax.Array:
  r"""Activation patching per head ``(L, H)``: the mean target log-probability on
  ``corrupt`` with that head's output taken from the run on ``clean`` (row by row), minus
  the unpatched corrupt run's. ``clean`` and ``corrupt`` must align token by token."""
  _check_tokens(clean, target_mask)
  _check_tokens(corrupt, target_mask)
  if clean.shape != corrupt.shape:
    raise ValueError(f"clean and corrupt must have one shape, got {clean.shape} and "
                     f"{corrupt.shape}")
  return _patching_effects(net, jnp.asarray(clean), jnp.asarray(corrupt),
                           jnp.asarray(target_mask, jnp.float32))


@jax.jit
def _patching_effects(net, clean, corrupt, target_mask):
  cfg = net.module().cfg

  def score(logits):
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), corrupt[:, 1:, None],
                               -1)[..., 0]
    return jnp.mean(tru.sequence_log_probs(logp, target_mask))

  _, clean_heads = head_outputs(net, clean)
  base_logits, _ = head_outputs(net, corrupt)
  base = score(base_logits)
  eye = jnp.eye(cfg.num_layers * cfg.num_heads, dtype=bool).reshape(
      -1, cfg.num_layers, cfg.num_heads)
  patched = jax.lax.map(lambda use: score(head_outputs(net, corrupt, clean_heads, use)[0]), eye)
  return (patched - base).reshape(cfg.num_layers, cfg.num_heads)


def vulnerable_heads(attr_flip: Any, attr_always: Any | None, k: int) -> list[tuple[int, int]]:
  """:math:`H_{vuln}`: the top-``k`` heads by ``attr_flip`` (``(L, H)``, prompts refused in
  the present and complied with in the past) that are not among the top-``k`` of
  ``attr_always`` (prompts refused in both; None or all-NaN: nothing removed), as
  ``(layer, head)`` pairs in decreasing attribution."""
  flip = np.asarray(attr_flip, float)
  if flip.ndim != 2:
    raise ValueError(f"attr_flip must be (L, H), got shape {flip.shape}")
  if not isinstance(k, int | np.integer) or not 1 <= k <= flip.size:
    raise ValueError(f"k must be an int in [1, {flip.size}], got {k!r}")
  top = lambda a: [divmod(int(i), a.shape[1]) for i in np.argsort(-a, axis=None)[:k]]  # noqa
  out = top(flip)
  if attr_always is not None:
    always = np.asarray(attr_always, float)
    if always.shape != flip.shape:
      raise ValueError(f"attr_always must have attr_flip's shape {flip.shape}, got "
                       f"{always.shape}")
    if not np.all(np.isnan(always)):
      drop = set(top(np.nan_to_num(always, nan=-np.inf)))
      out = [h for h in out if h not in drop]
  return out


def scales_to_head_scale(scales: jax.Array, heads: Sequence[tuple[int, int]], num_layers: int,
                         num_heads: int) -> jax.Array:
  """The toolkit's ``head_scale (L, H, D)``: ones, with head ``heads[j]``'s channels set to
  ``scales[j] (D,)``; ``scales`` is ``(K, D)`` with ``K = len(heads)``."""
  scales = jnp.asarray(scales)
  heads = [tuple(map(int, h)) for h in heads]
  if scales.ndim != 2 or scales.shape[0] != len(heads):
    raise ValueError(f"scales must be (len(heads)={len(heads)}, head_dim), got {scales.shape}")
  if any(not (0 <= l < num_layers and 0 <= h < num_heads) for l, h in heads):  # noqa: E741
    raise ValueError(f"heads must lie in (num_layers={num_layers}, num_heads={num_heads}), "
                     f"got {heads}")
  out = jnp.ones((num_layers, num_heads, scales.shape[1]), scales.dtype)
  for j, (l, h) in enumerate(heads):  # noqa: E741
    out = out.at[l, h].set(scales[j])
  return out


def _map_out(params: Any, fn: Callable[[int, str, jax.Array], jax.Array]) -> Any:
  """Applies ``fn(layer, 'kernel' | 'bias', x)`` to every attention output projection."""
  def go(path, x):
    keys = [getattr(p, "key", getattr(p, "name", None)) for p in path]
    if "attn" in keys and "out" in keys and "blocks" in keys:
      layer = keys[keys.index("blocks") + 1]
      name = keys[keys.index("out") + 1]
      return fn(int(layer), name, x)
    return x
  return jax.tree_util.tree_map_with_path(go, params)


def fold_head_scale(params: Any, head_scale: jax.Array) -> Any:
  r"""The paper's folding :math:`W'_O = \mathrm{diag}(s) W_O`: parameters whose plain forward
  pass equals the forward pass with ``head_scale (L, H, D)`` (the scales unloaded into the
  weights)."""
  head_scale = jnp.asarray(head_scale)
  if head_scale.ndim != 3:
    raise ValueError(f"head_scale must be (L, H, head_dim), got shape {head_scale.shape}")
  return _map_out(params, lambda l, n, x: x * head_scale[l].reshape(-1, 1)  # noqa: E741
                  if n == "kernel" else x)


def fold_post_scale(params: Any, post_scale: jax.Array) -> Any:
  r"""The official code's post-projection version: the attention block's output (after
  ``W_O`` and its bias) multiplied channel-wise by ``post_scale[l] (d_model,)``, folded as
  :math:`W'_O = W_O \mathrm{diag}(s)`, :math:`b' = s \odot b`. ``post_scale`` is
  ``(L, d_model)`` (or ``(L, H, D)``, read as head-sized slices of the output channels)."""
  post_scale = jnp.asarray(post_scale)
  if post_scale.ndim not in (2, 3):
    raise ValueError(f"post_scale must be (L, d_model) or (L, H, D), got {post_scale.shape}")
  flat = post_scale.reshape(post_scale.shape[0], -1)
  return _map_out(params, lambda l, n, x: x * flat[l])  # noqa: E741


def classify(words: Sequence[str], refusal: Sequence[str], answers: Sequence[str]) -> str:
  """``"refusal"`` when the output starts with the refusal, ``"comply"`` when its first
  word is an answer word, else ``"other"``."""
  words = list(words)
  refusal = list(refusal)
  if not refusal:
    raise ValueError("refusal must be a non-empty word sequence")
  if words[:len(refusal)] == refusal:
    return "refusal"
  return "comply" if words and words[0] in set(answers) else "other"


def rates(kinds: Sequence[str]) -> dict[str, float]:
  """Shares of ``"refusal"``, ``"comply"`` and ``"other"``; on harmful prompts the attack
  success rate is the complied share, on benign prompts the over-refusal rate is the
  refusal share."""
  kinds = list(kinds)
  bad = set(kinds) - {"refusal", "comply", "other"}
  if not kinds or bad:
    raise ValueError(f"kinds must be a non-empty list of refusal / comply / other, got "
                     f"{sorted(bad) or 'nothing'}")
  return {k: kinds.count(k) / len(kinds) for k in ("refusal", "comply", "other")}
