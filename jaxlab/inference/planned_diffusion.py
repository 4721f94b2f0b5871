r"""Planned Diffusion: an autoregressive plan, then its spans denoised in parallel.

One transformer writes a short plan autoregressively, one
``<promise>-<topic> topic.. n </topic>`` per span (``n``: the span's length in units of
``unit`` tokens), and then fills every span at once by masked diffusion: a scaffold of
``<async>``, ``n * unit`` mask tokens, ``</async>`` per span, each block unmasked by its own
confidence schedule. The same network does both through the attention mask
(:func:`attention_mask`, the official ``attention_mask_v2``):

* causal by default;
* bidirectional inside an ``<async> .. </async>`` block (delimiters included);
* a block sees the context before the first block of its group (so parallel blocks are
  isolated from each other: "v2", sparse; ``dense=True`` merges adjacent blocks into one
  bidirectional block: "v3", the paper's ablation of block sparsity);
* tokens after a block cannot see inside it until a ``<sync/>``, which makes every
  completed block visible to the tokens from the sync on.

Training (:func:`hybrid_loss`) puts both objectives on one sequence. Noise
``t ~ U(0, 1)``, ``t <- (1 - eps) t + eps`` (``eps = 1e-3``); a content token (strictly
inside a block) is masked iff ``u < t`` (plan tokens and the delimiters never are); then

.. math::
  \mathcal{L} = \frac{1}{|x| - |\text{prompt}|}\Big[\sum_{i \in \text{plan}}
      -\log p(y_i \mid x_{\le i})
      + \sum_{i\ \text{masked}} \frac{-\log p(x_i \mid \tilde x)}{t}\Big],

where the plan label ``y_i`` is the next token *outside* the blocks (the label of the
last ``</topic>`` skips the blocks to the token after them: EOS or ``<sync/>``).

Inference (:func:`planned_decode`): the plan by greedy decoding with the toolkit's KV
cache (:func:`jaxlab.models.decoding.generate`, stopping at EOS), the scaffold built from
it, then :func:`denoise_blocks`: every step is one forward pass over the whole sequence;
each block unmasks its ``max(1, remaining // (steps - i))`` most confident masked tokens
(``= ratio x remaining`` with the official linear schedule ``ratio = 1 - s/t``; all that
remain at the last step), ``steps = ceil(r * max_k l_k)``; with a confidence threshold
``tau`` (0.9 in the paper) a block keeps its top candidate and only the others with
confidence ``>= tau``, carries the rest over to its next quota, and steps run past
``steps`` until every block is filled. The count of sequential forward passes is
returned per row (plan tokens + denoising steps).

What is the paper's and what is ours: the format, masks, noise, loss and the unmasking
rules follow the official code (``planned-diffusion/planned-diffusion``:
``train/attention_mask_v2.py``, ``_v3.py``, ``train/sft_trainer.py``, ``dream/pd_utils.py``).
Ours: the model predicts a masked token at its own position (the paper fine-tunes Dream,
whose diffusion labels are shifted by one as an autoregressive model's); plan tokens'
cross-entropy is not divided by ``t`` (the formula in the paper; the released trainer
divides every label's loss by ``t``: ``weight_plan_by_t=True``); the denominator counts
the prompt's tokens (the released collator counts one fewer); a batch is the mean of its
rows' losses (the release trains one sequence per step); the decode runs one stage (plan,
blocks, EOS); a plan with ``<sync/>`` for further stages is not decoded (the mask and the
loss support it); the prefix's keys are recomputed every denoising step (the release's
cached variant keeps them).

Example:
  >>> ids = PlanTokens(promise=..., end_topic=..., async_start=..., async_end=...,
  ...                  sync=..., eos=EOS, mask=MASK, pad=PAD, numerals=(..10 ids..), unit=4)
  >>> batch = hybrid_batch(tokens, lengths, prompt_len, ids)       # host side, numpy
  >>> loss, info = hybrid_loss(net, jax.tree.map(jnp.asarray, batch), key, ids.mask)
  >>> out = planned_decode(net, prompts, ids, max_plan_tokens=17, step_ratio=1.0)
  >>> out.spans[0], out.plan_passes[0], out.denoise_passes[0]

References:
  "Planned Diffusion", arXiv:2510.18087, 2025.
  Sahoo et al., "Simple and Effective Masked Diffusion Language Models", arXiv:2406.07524,
  2024, and Nie et al., "Large Language Diffusion Models", arXiv:2502.09992, 2025 (the
  masked-diffusion loss weighted by ``1/t``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.models import decoding
from jaxlab.nn import Net

__all__ = ["Decoded", "HybridBatch", "PlanTokens", "attention_mask", "attention_masks",
           "autoregressive_batch", "build_scaffold", "denoise_blocks", "hybrid_batch",
           "hybrid_loss", "hybrid_loss_from_logits", "hybrid_targets", "masked_diffusion_batch",
           "noise", "pad_batch", "parse_plan", "planned_decode"]


@dataclasses.dataclass(frozen=True)
class PlanTokens:
  """The control tokens' ids (hashable: a static argument)."""

  promise: int  # <promise>-<topic>: opens a span's plan entry
  end_topic: int  # </topic>: closes it
  async_start: int  # <async>
  async_end: int  # </async>
  sync: int  # <sync/>: later tokens see the completed blocks
  eos: int  # ends the sequence (the paper's <|im_end|>)
  mask: int  # the diffusion mask token
  pad: int  # right padding
  numerals: tuple[int, ...]  # ids of "0".."9": the plan's length digits
  unit: int = 10  # tokens per length unit (the paper's 10)

  def __post_init__(self):
    for f in ("promise", "end_topic", "async_start", "async_end", "sync", "eos", "mask", "pad"):
      v = getattr(self, f)
      if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ValueError(f"{f} must be a token id (int >= 0), got {v!r}")
    if len(self.numerals) != 10 or not all(isinstance(v, int) for v in self.numerals):
      raise ValueError(f"numerals must be the 10 ids of '0'..'9', got {self.numerals!r}")
    if not isinstance(self.unit, int) or isinstance(self.unit, bool) or self.unit < 1:
      raise ValueError(f"unit must be a positive int, got {self.unit!r}")


def _row(name: str, tokens: Any) -> list[int]:
  x = np.asarray(tokens)
  if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
    raise TypeError(f"{name} must be a 1-D int array, got {x.dtype} {x.shape}")
  return [int(v) for v in x]


def _blocks(toks: list[int], ids: PlanTokens) -> list[tuple[int, int]]:
  """``(start, end)`` of every ``<async> .. </async>`` block, delimiters included."""
  out, start = [], None
  for i, t in enumerate(toks):
    if t == ids.async_start:
      if start is not None:
        raise ValueError(f"tokens: nested <async> at position {i}")
      start = i
    elif t == ids.async_end:
      if start is None:
        raise ValueError(f"tokens: </async> without <async> at position {i}")
      out.append((start, i))
      start = None
  if start is not None:
    raise ValueError(f"tokens: <async> at position {start} is never closed")
  return out


def attention_mask(tokens: Any, ids: PlanTokens, dense: bool = False) -> np.ndarray:
  """The Planned-Diffusion attention mask of one sequence, ``(T, T)`` bool (True: row
  attends to column).

  Causal; bidirectional inside each block; a block sees the context before the first
  block (so not the other blocks of its group); later tokens cannot see into a block until a
  ``<sync/>``, from which on they see every completed block. ``dense=True`` (v3): a run
  of adjacent blocks (``</async><async>``) is one bidirectional block.

  Args:
    tokens: 1-D int token ids (host side: the mask is data, built once per example).
    ids: the control tokens.
    dense: merge adjacent blocks (the block-sparsity ablation).

  Returns:
    ``np.ndarray (T, T)`` of bool.
  """
  toks = _row("tokens", tokens)
  n = len(toks)
  mask = np.tril(np.ones((n, n), bool))
  blocks = _blocks(toks, ids)
  if dense:  # merge runs of adjacent blocks (v3)
    merged = []
    for s, e in blocks:
      if merged and merged[-1][1] + 1 == s:
        merged[-1] = (merged[-1][0], e)
      else:
        merged.append((s, e))
    blocks = merged
  syncs = [i for i, t in enumerate(toks) if t == ids.sync]
  done: list[tuple[int, int]] = []
  for s, e in blocks:
    mask[s:e + 1, s:e + 1] = True  # bidirectional within the block
    mask[e + 1:, s:e + 1] = False  # the outside cannot see in ...
    first = min([b for b, _ in done] + [s])
    mask[s:e + 1, :first] = True  # the block sees the context before the first block
    done.append((s, e))
  for i in syncs:  # ... until a sync: from it on, every completed block is visible
    for s, e in blocks:
      if e < i:
        mask[i:, s:e + 1] = True
  return mask


def attention_masks(tokens: Any, ids: PlanTokens, dense: bool = False) -> np.ndarray:
  """:func:`attention_mask` of every row of ``tokens (N, T)``: ``(N, T, T)`` bool."""
  x = np.asarray(tokens)
  if x.ndim != 2:
    raise TypeError(f"tokens must be a 2-D int array (N, T), got shape {x.shape}")
  return np.stack([attention_mask(r, ids, dense) for r in x])


def hybrid_targets(tokens: Any, prompt_len: int, ids: PlanTokens, length: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Labels of one sequence: ``(ar_labels (T,), ar_weight (T,), content (T,))``.

  ``ar_labels[i]``: the next token outside the blocks (skipping any blocks after ``i``),
  weighted 1 at positions ``i >= prompt_len - 1`` outside the blocks that have one (the
  last prompt token predicts the first plan token; ``</async>`` and the last token have
  none). ``content[i]``: position ``i`` is strictly inside a block (a diffusion target).
  Positions at or past ``length`` (padding) get neither.
  """
  toks = _row("tokens", tokens)
  n = len(toks) if length is None else int(length)
  if not isinstance(prompt_len, int) or not 1 <= prompt_len <= n:
    raise ValueError(f"prompt_len must be an int in [1, length={n}], got {prompt_len!r}")
  toks_n = toks[:n]
  blocks = _blocks(toks_n, ids)
  inside = np.zeros(len(toks), bool)  # delimiters included
  content = np.zeros(len(toks), bool)
  for s, e in blocks:
    inside[s:e + 1] = True
    content[s + 1:e] = True
  labels = np.zeros(len(toks), np.int32)
  weight = np.zeros(len(toks), np.float32)
  outside = [i for i in range(n) if not inside[i]]
  for a, b in zip(outside[:-1], outside[1:], strict=True):
    if a >= prompt_len - 1:
      labels[a], weight[a] = toks[b], 1.0
  return labels, weight, content


class HybridBatch(NamedTuple):
  """One sequence per row: ``tokens (N, T)``, ``attn (N, T, T)`` bool, the plan's
  ``ar_labels`` / ``ar_weight (N, T)``, ``content (N, T)`` bool (maskable) and
  ``denom (N,)`` (tokens minus prompt)."""

  tokens: Any
  attn: Any
  ar_labels: Any
  ar_weight: Any
  content: Any
  denom: Any


def hybrid_batch(tokens: Any, lengths: Any, prompt_len: int, ids: PlanTokens,
                 dense: bool = False) -> HybridBatch:
  """:class:`HybridBatch` of Planned-Diffusion rows ``tokens (N, T)`` (right-padded; row
  ``i`` has ``lengths[i]`` real tokens), built on the host."""
  x = np.asarray(tokens)
  if x.ndim != 2:
    raise TypeError(f"tokens must be a 2-D int array (N, T), got shape {x.shape}")
  lengths = np.asarray(lengths)
  if lengths.shape != (x.shape[0],) or np.any(lengths > x.shape[1]) or np.any(
      lengths <= prompt_len):
    raise ValueError(f"lengths must be (N,) = ({x.shape[0]},) ints in (prompt_len, T], got "
                     f"{lengths}")
  parts = [hybrid_targets(r, prompt_len, ids, int(n)) for r, n in zip(x, lengths, strict=True)]
  labels, weight, content = (np.stack(p) for p in zip(*parts, strict=True))
  return HybridBatch(x.astype(np.int32), attention_masks(x, ids, dense), labels, weight,
                     content, (lengths - prompt_len).astype(np.float32))


def masked_diffusion_batch(tokens: Any, prompt_len: int) -> HybridBatch:
  """Pure masked diffusion as a :class:`HybridBatch`: every token after the prompt is
  content (PAD after EOS included, so the model learns where the answer ends),
  attention fully bidirectional, no plan tokens; ``denom = T - prompt_len``."""
  x = np.asarray(tokens)
  if x.ndim != 2 or not 1 <= prompt_len < x.shape[1]:
    raise ValueError(f"tokens must be (N, T) with 1 <= prompt_len < T, got {x.shape}, "
                     f"prompt_len={prompt_len!r}")
  n, t = x.shape
  content = np.broadcast_to(np.arange(t) >= prompt_len, (n, t)).copy()
  return HybridBatch(x.astype(np.int32), np.ones((n, t, t), bool), np.zeros((n, t), np.int32),
                     np.zeros((n, t), np.float32), content,
                     np.full(n, t - prompt_len, np.float32))


def autoregressive_batch(tokens: Any, loss_mask: Any) -> HybridBatch:
  """Plain next-token training as a :class:`HybridBatch`: causal attention, every label
  the next token, weighted by ``loss_mask (N, T - 1)`` (as
  :func:`jaxlab.models.transformer.next_token_loss` takes it), no content, ``denom`` the
  row's weight: the hybrid loss is then the mean over rows of each row's mean
  next-token cross-entropy."""
  x, w = np.asarray(tokens), np.asarray(loss_mask, np.float32)
  if x.ndim != 2 or w.shape != (x.shape[0], x.shape[1] - 1):
    raise ValueError(f"tokens must be (N, T) and loss_mask (N, T - 1), got {x.shape}, {w.shape}")
  n, t = x.shape
  labels = np.concatenate([x[:, 1:], np.zeros((n, 1), x.dtype)], 1).astype(np.int32)
  weight = np.concatenate([w, np.zeros((n, 1), np.float32)], 1)
  return HybridBatch(x.astype(np.int32), np.broadcast_to(np.tril(np.ones((t, t), bool)),
                                                         (n, t, t)).copy(),
                     labels, weight, np.zeros((n, t), bool), np.maximum(w.sum(1), 1.0))


def pad_batch(batch: HybridBatch, length: int, pad_id: int) -> HybridBatch:
  """``batch`` right-padded to ``length`` tokens: PAD tokens without labels, attending
  only to themselves and seen by no other token (so the real tokens compute exactly what
  they did). Lets batches of different formats share one compiled program."""
  x = np.asarray(batch.tokens)
  n, t = x.shape
  if not isinstance(length, int) or length < t:
    raise ValueError(f"length must be an int >= the batch's {t} tokens, got {length!r}")
  extra = length - t
  widen = lambda a, v: np.concatenate([np.asarray(a), np.full((n, extra), v, np.asarray(a).dtype)],
                                      1)  # noqa: E731
  attn = np.zeros((n, length, length), bool)
  attn[:, :t, :t] = np.asarray(batch.attn)
  attn[:, np.arange(t, length), np.arange(t, length)] = True
  return HybridBatch(widen(x, pad_id), attn, widen(batch.ar_labels, 0),
                     widen(batch.ar_weight, 0.0), widen(batch.content, False),
                     np.asarray(batch.denom))


def noise(key: jax.Array, tokens: jax.Array, content: jax.Array, mask_id: int,
          eps: float = 1e-3) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The forward process: ``t ~ U(0, 1)`` per row, ``t <- (1 - eps) t + eps``; a content
  token is masked iff ``u < t``. Returns ``(noisy tokens, masked (N, T) bool, t (N,))``."""
  k_t, k_u = jax.random.split(key)
  t = jax.random.uniform(k_t, tokens.shape[:1])
  t = (1 - eps) * t + eps
  masked = content & (jax.random.uniform(k_u, tokens.shape) < t[:, None])
  return jnp.where(masked, mask_id, tokens), masked, t


def hybrid_loss_from_logits(logits: jax.Array, batch: HybridBatch, masked: jax.Array,
                            t: jax.Array, weight_plan_by_t: bool = False
                            ) -> tuple[jax.Array, dict]:
  """The hybrid loss given the network's ``logits (N, T, V)`` on the noisy rows:
  ``mean_rows [sum_plan CE(ar_labels) + sum_masked CE(tokens) / t] / denom``.

  ``weight_plan_by_t``: divide the plan's cross-entropy by ``t`` too (the released
  trainer); default False (the paper's formula). Returns ``(loss, info)``.
  """
  ar_ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch.ar_labels)
  diff_ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch.tokens)
  plan = jnp.sum(ar_ce * batch.ar_weight, -1)
  if weight_plan_by_t:
    plan = plan / t
  content = jnp.sum(jnp.where(masked, diff_ce, 0.0), -1) / t
  loss = jnp.mean((plan + content) / batch.denom)
  info = {"loss/plan_ce": jnp.sum(ar_ce * batch.ar_weight) / jnp.maximum(
      jnp.sum(batch.ar_weight), 1.0),
      "loss/masked_ce": jnp.sum(jnp.where(masked, diff_ce, 0.0)) / jnp.maximum(
          jnp.sum(masked), 1)}
  return loss, info


def hybrid_loss(net: Net, batch: HybridBatch, key: jax.Array, mask_id: int,
                eps: float = 1e-3, weight_plan_by_t: bool = False) -> tuple[jax.Array, dict]:
  """Noises ``batch`` (:func:`noise`), runs the network with the batch's attention mask
  (``causal=False``: causality is in the mask) and returns
  :func:`hybrid_loss_from_logits`. Pure and jittable; ``net`` is a :class:`Net`."""
  x, masked, t = noise(key, batch.tokens, batch.content, mask_id, eps)
  logits = net.module().forward(x, mask=batch.attn[:, None], causal=False).logits
  return hybrid_loss_from_logits(logits, batch, masked, t, weight_plan_by_t)


# ------------------------------------------------------------------------------ inference
def parse_plan(plan: Any, ids: PlanTokens) -> list[tuple[tuple[int, ...], int]] | None:
  """The spans a generated plan promises, ``[(topic ids, units), ..]``, read up to the
  first EOS; ``None`` if it is malformed (anything but ``<promise>-<topic> topic.. n
  </topic>`` entries, a length that is not a numeral >= 1, no span, no EOS)."""
  toks = _row("plan", plan)
  if ids.eos not in toks:
    return None
  toks = toks[:toks.index(ids.eos)]
  spans, i = [], 0
  while i < len(toks):
    if toks[i] != ids.promise or ids.end_topic not in toks[i:]:
      return None
    j = toks.index(ids.end_topic, i)
    entry = toks[i + 1:j]
    if len(entry) < 2 or entry[-1] not in ids.numerals or ids.numerals.index(entry[-1]) < 1:
      return None
    spans.append((tuple(entry[:-1]), ids.numerals.index(entry[-1])))
    i = j + 1
  return spans or None


def build_scaffold(prefix: Any, units: list[int], ids: PlanTokens
                   ) -> tuple[np.ndarray, np.ndarray]:
  """``prefix ++ (<async>, units_k * unit masks, </async>) per span``: the tokens and each
  position's block index (``-1`` outside the blocks' contents)."""
  toks = _row("prefix", prefix)
  block = [-1] * len(toks)
  for k, n in enumerate(units):
    toks += [ids.async_start] + [ids.mask] * (n * ids.unit) + [ids.async_end]
    block += [-1] + [k] * (n * ids.unit) + [-1]
  return np.array(toks, np.int32), np.array(block, np.int32)


class _DenoiseState(NamedTuple):
  x: jax.Array  # (B, S) tokens
  i: jax.Array  # step index
  leftover: jax.Array  # (B, NB) candidates a block deferred (threshold rule)
  passes: jax.Array  # (B,) forward passes a row needed


def denoise_blocks(net: Net, tokens: jax.Array, attn: jax.Array, block_id: jax.Array,
                   steps: jax.Array, *, num_blocks: int, mask_id: int,
                   threshold: float | None = None) -> tuple[jax.Array, jax.Array]:
  """Fills every block's masks in parallel, per-block confidence unmasking.

  Step ``i`` runs the network once on ``tokens (B, S)`` with ``attn (B, S, S)``; a
  block with ``m`` masks left unmasks its ``max(1, m // (steps - i))`` most confident
  (the argmax's probability; ``mask_id`` never predicted), all of them at its row's last
  step ``steps[b] - 1``. With ``threshold``: the top candidate always, the other
  candidates only at confidence ``>= threshold``; the rejected ones are added to the
  block's next quota, and past ``steps`` the quota is ``1 + carried`` until the block is
  full (the official ``block_unmask_confidence_threshold``).

  Args:
    net: a :class:`Net` holding the transformer.
    tokens: int ``(B, S)`` with ``mask_id`` in the blocks.
    attn: bool ``(B, S, S)``: :func:`attention_masks` of the scaffold.
    block_id: int ``(B, S)``: block index ``0..num_blocks-1`` of each masked slot, ``-1``
      elsewhere.
    steps: int ``(B,)``: each row's scheduled steps (``>= 1``).
    num_blocks: static bound on the blocks per row.
    mask_id: the mask token.
    threshold: confidence threshold ``tau`` or None.

  Returns:
    ``(tokens (B, S), passes (B,))``: the filled rows and each row's number of forward
    passes (steps in which it still had a mask).
  """
  if not isinstance(num_blocks, int) or num_blocks < 1:
    raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
  if threshold is not None and not (isinstance(threshold, float) and 0.0 < threshold <= 1.0):
    raise ValueError(f"threshold must be a float in (0, 1] or None, got {threshold!r}")
  # threshold 0 keeps every candidate (probabilities are >= 0): the plain rule, one program
  tau = jnp.asarray(0.0 if threshold is None else threshold, jnp.float32)
  return _denoise(net, jnp.asarray(tokens, jnp.int32), jnp.asarray(attn, bool),
                  jnp.asarray(block_id, jnp.int32), jnp.asarray(steps, jnp.int32), tau,
                  num_blocks, mask_id)


@functools.partial(jax.jit, static_argnums=(6, 7))
def _denoise(net, tokens, attn, block_id, steps, threshold, num_blocks, mask_id):
  b, s = tokens.shape
  onehot = block_id[..., None] == jnp.arange(num_blocks)  # (B, S, NB)
  same = (block_id[:, :, None] == block_id[:, None, :]) & (block_id[:, :, None] >= 0)
  before = jnp.arange(s)[None, :] < jnp.arange(s)[:, None]  # (S, S): column precedes row
  max_iters = s  # every step fills >= 1 slot of every unfinished block

  def masked_of(x):
    return (x == mask_id) & (block_id >= 0)

  def cond(st):
    return jnp.any(masked_of(st.x)) & (st.i < max_iters)

  def body(st):
    masked = masked_of(st.x)
    logits = net.module().forward(st.x, mask=attn[:, None], causal=False).logits
    logits = logits.at[..., mask_id].set(-jnp.inf)
    probs = jax.nn.softmax(logits.astype(jnp.float32), -1)
    tok = jnp.argmax(probs, -1).astype(st.x.dtype)
    conf = jnp.where(masked, jnp.max(probs, -1), -jnp.inf)
    remaining = jnp.sum(onehot & masked[..., None], 1)  # (B, NB)
    left = steps[:, None] - st.i
    base = jnp.where(left > 0, jnp.maximum(1, remaining // jnp.maximum(left, 1)), 1)
    quota = jnp.minimum(base + st.leftover, remaining)
    # rank of each masked slot among its block's masked slots (0: most confident; ties by
    # position)
    c_row, c_col = conf[:, :, None], conf[:, None, :]
    higher = (c_col > c_row) | ((c_col == c_row) & before[None])
    rank = jnp.sum(same & masked[:, None, :] & higher, -1)
    slot_quota = jnp.sum(jnp.where(onehot, quota[:, None, :], 0), -1)
    cand = masked & (rank < slot_quota)
    keep = cand & ((rank == 0) | (conf >= threshold))
    leftover = jnp.sum(onehot & (cand & ~keep)[..., None], 1).astype(jnp.int32)
    passes = st.passes + jnp.any(masked, -1).astype(jnp.int32)
    return _DenoiseState(jnp.where(keep, tok, st.x), st.i + 1, leftover, passes)

  init = _DenoiseState(tokens, jnp.zeros((), jnp.int32), jnp.zeros((b, num_blocks), jnp.int32),
                       jnp.zeros(b, jnp.int32))
  out = jax.lax.while_loop(cond, body, init)
  return out.x, out.passes


class Decoded(NamedTuple):
  """:func:`planned_decode`'s result, per row: the plan tokens generated (up to EOS), the
  parsed spans (``None``: malformed plan), the filled blocks' contents (one array per
  span), the plan's forward passes (its tokens, EOS included) and the denoising passes."""

  plans: list
  spans: list
  contents: list
  plan_passes: np.ndarray
  denoise_passes: np.ndarray


def planned_decode(model: Any, prompt: Any, ids: PlanTokens, max_plan_tokens: int, *,
                   step_ratio: float = 1.0, threshold: float | None = None,
                   dense: bool = False, max_blocks: int | None = None,
                   plan: Any = None, width: int | None = None) -> Decoded:
  """Planned Diffusion's decoding: the plan autoregressively, then all spans at once.

  Args:
    model: a :class:`Net` (or ``Transformer``) trained with :func:`hybrid_loss`.
    prompt: int ``(B, P)`` prompts sharing their length.
    ids: the control tokens (``ids.unit``: tokens per planned unit).
    max_plan_tokens: plan decoding budget (a plan without EOS within it is malformed).
    step_ratio: ``r``: a row's denoising steps are ``ceil(r * max_k l_k)`` (``0 < r <= 1``).
    threshold: the confidence threshold ``tau`` (None: plain top-k schedule).
    dense: the v3 mask (adjacent blocks see each other).
    max_blocks: bound on spans per plan (default ``max_plan_tokens // 3``).
    plan: a precomputed :func:`jaxlab.models.decoding.generate` result for ``prompt``
      (to share one plan between settings); decoded greedily when None.
    width: pad the scaffolds to this many tokens (one compiled denoiser for every batch;
      default: the longest scaffold).

  Returns:
    :class:`Decoded`.
  """
  net = decoding._as_net(model)
  prompt = np.asarray(prompt)
  if prompt.ndim != 2 or not np.issubdtype(prompt.dtype, np.integer):
    raise TypeError(f"prompt must be an int array (B, P), got {prompt.dtype} {prompt.shape}")
  if not isinstance(step_ratio, (int, float)) or not 0 < step_ratio <= 1:
    raise ValueError(f"step_ratio must be in (0, 1], got {step_ratio!r}")
  if not isinstance(max_plan_tokens, int) or max_plan_tokens < 4:
    raise ValueError(f"max_plan_tokens must be an int >= 4, got {max_plan_tokens!r}")
  if threshold is not None and not (isinstance(threshold, float) and 0.0 < threshold <= 1.0):
    raise ValueError(f"threshold must be a float in (0, 1] or None, got {threshold!r}")
  max_blocks = max_plan_tokens // 3 if max_blocks is None else max_blocks
  if plan is None:
    plan = decoding.generate(net, jnp.asarray(prompt, jnp.int32), jax.random.key(0),
                             max_plan_tokens, temperature=0.0, eos_id=ids.eos, pad_id=ids.pad)
  plan_tokens = np.asarray(plan.tokens)
  plan_passes = np.asarray(plan.lengths).astype(np.int32)
  plans, spans, rows, blocks, steps = [], [], [], [], []
  for p, toks in zip(prompt, plan_tokens, strict=True):
    n = int(np.argmax(toks == ids.eos)) + 1 if np.any(toks == ids.eos) else len(toks)
    plans.append(toks[:n])
    parsed = parse_plan(toks, ids)
    if parsed is not None and len(parsed) > max_blocks:
      parsed = None
    spans.append(parsed)
    units = [] if parsed is None else [u for _, u in parsed]
    x, blk = build_scaffold(np.concatenate([p, toks[:n - 1]]) if parsed else p, units, ids)
    rows.append(x)
    blocks.append(blk)
    steps.append(max(1, math.ceil(step_ratio * max(units) * ids.unit)) if units else 1)
  longest = max(map(len, rows))
  if width is None:
    width = longest
  elif not isinstance(width, int) or width < longest:
    raise ValueError(f"width must be an int >= the longest scaffold ({longest}), got {width!r}")
  tokens = np.full((len(rows), width), ids.pad, np.int32)
  block_id = np.full((len(rows), width), -1, np.int32)
  for i, (x, blk) in enumerate(zip(rows, blocks, strict=True)):
    tokens[i, :len(x)], block_id[i, :len(x)] = x, blk
  attn = attention_masks(tokens, ids, dense)
  filled, passes = denoise_blocks(net, tokens, attn, block_id, np.array(steps, np.int32),
                                  num_blocks=max_blocks, mask_id=ids.mask, threshold=threshold)
  filled = np.asarray(filled)
  contents = [[filled[i][block_id[i] == k] for k in range(len(s or []))]
              for i, s in enumerate(spans)]
  return Decoded(plans, spans, contents, plan_passes, np.asarray(passes))
