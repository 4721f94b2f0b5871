r"""ATA: attending to the active subtask, by masking the exclusive ones.

An instruction holds ``m`` subtasks :math:`T_1..T_m` (token spans of the prompt) under a
structure :math:`S \in \{\mathrm{Chain}, \mathrm{Branch}, \mathrm{Parallel}\}`; two
subtasks are *exclusive* (:math:`T_i \perp T_j`) when answering one must not read the
other. ATA steers a set of selected attention heads with additive masks on their logits:

* **mutual mask** (prefill and decode): :math:`A' = A + M` with
  :math:`M(q, k) = -\alpha` for a query in :math:`T_i` and a key in :math:`T_j`,
  :math:`T_i \perp T_j` (:func:`mutual_bias`); :math:`\alpha = \log 100`;
* **active-subtask score** at step :math:`t` from the attention :math:`A` (averaged over the
  selected heads):

  .. math::
    \mathrm{score}(T_i, t) = \frac{1}{|T_i|} \sum_{k \in T_i} \frac{1}{t - k}
        \sum_{k \le q \le t} A(q, k), \qquad T_{key} = \arg\max_i \mathrm{score}(T_i, t)

  (:func:`active_scores`); a switch is accepted only if the entropy of the normalised
  scores is below :math:`\tfrac12 \log m` (:func:`entropy_gate`), and the structure rules
  hold: Chain / Parallel only move forward, Branch locks after its first choice
  (:func:`update_key`);
* **dynamic mask** (decode): :math:`M(:, T_j) = -\alpha` for every :math:`T_j \perp T_{key}`
  (:func:`dynamic_bias`);
* **heads**: only selected heads are steered (the paper: 20 heads for Chain / Parallel, 50
  for Branch; all heads hurts). The paper's selection rule (its App. A.3) is not public;
  ours (:func:`head_scores`, :func:`select_heads`) ranks heads by their attention mass on
  the gold active span on teacher-forced rows, and the scores are averaged over the chosen
  heads.

:func:`generate` runs greedy decoding with all of it through the toolkit transformer's
KV cache and its ``attend`` hook (:mod:`jaxlab.models.transformer`): the hook adds the
bias to the selected heads only and returns each layer's attention weights, from which the
running column sums :math:`\sum_{q \le t} A(q, k)` (hence the score) are kept.

What is the paper's and what is ours: the masks, the score, the entropy gate, the structure
rules and the arms are the paper's (OpenReview wwA0X3UfAn, no code found); the parse of the
instruction into spans is gold here (the paper asks the LLM to parse), the head-selection
rule is ours, the score is read from the attention the steered heads would pay without the
bias, the initial key is the first subtask for Chain / Parallel and "none" for Branch (no
dynamic mask until the gate first accepts), and forward moves may skip subtasks.

Example:
  >>> heads = select_heads(head_scores(attn, query_span, span_id), 4)
  >>> out = generate(net, prompt, span_id, exclusive, heads, max_new=20, num_spans=4,
  ...                alpha=jnp.log(100.0), structure=PARALLEL)
  >>> out.tokens, out.keys                          # (B, 20) each

References:
  "Attend to the Active: Structure-Aware Dynamic Attention Steering for Multi-Subtask
  Instructions" (ATA), ICLR 2026 submission, OpenReview wwA0X3UfAn.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.models.transformer import init_cache
from jaxlab.nn import Net

CHAIN, BRANCH, PARALLEL = 0, 1, 2
STRUCTURES = {"chain": CHAIN, "branch": BRANCH, "parallel": PARALLEL}
ALPHA = float(np.log(100.0))  # the paper's mask strength


def exclusive_pairs(m: int, structure: int) -> np.ndarray:
  r"""The exclusivity matrix ``(m, m)`` of a structure: every pair of distinct subtasks is
  exclusive for Parallel and Branch (the arms of a branch and independent tasks must not
  read each other); for Chain a step reads the steps before it, so :math:`T_i \perp T_j`
  only for ``j > i`` (a step must not read the steps still to come)."""
  if structure not in (CHAIN, BRANCH, PARALLEL):
    raise ValueError(f"structure must be CHAIN, BRANCH or PARALLEL (0, 1, 2), got {structure!r}")
  i, j = np.indices((m, m))
  return (j > i) if structure == CHAIN else (i != j)


def _check_span_id(span_id) -> None:
  if not jnp.issubdtype(jnp.asarray(span_id).dtype, jnp.integer):
    raise TypeError(f"span_id must be an int array (-1 outside every span), got "
                    f"{jnp.asarray(span_id).dtype}")


def mutual_bias(span_id: jax.Array, exclusive: jax.Array, alpha) -> jax.Array:
  r"""The mutual mask :math:`M(q, k) = -\alpha\,[T(q) \perp T(k)]` over a prompt.

  Args:
    span_id: int ``(..., S)``, the subtask of each position (``-1``: none).
    exclusive: bool ``(..., m, m)``, :math:`T_i \perp T_j`.
    alpha: the mask strength (>= 0).

  Returns:
    ``(..., S, S)`` float (query, key): ``-alpha`` where both positions are in subtasks and
    those are exclusive, else 0.
  """
  _check_span_id(span_id)
  span_id = jnp.asarray(span_id)
  exclusive = jnp.asarray(exclusive, bool)
  m = exclusive.shape[-1]
  q, k = span_id[..., :, None], span_id[..., None, :]
  inside = (q >= 0) & (k >= 0)
  pair = jnp.clip(q, 0, m - 1) * m + jnp.clip(k, 0, m - 1)  # (..., S, S)
  flat = jnp.broadcast_to(exclusive, (*span_id.shape[:-1], m, m)).reshape(
      *span_id.shape[:-1], m * m)
  ex = jnp.take_along_axis(flat, pair.reshape(*pair.shape[:-2], -1), axis=-1).reshape(pair.shape)
  return jnp.where(inside & ex, -jnp.asarray(alpha, jnp.float32), 0.0)


def dynamic_bias(span_id: jax.Array, key: jax.Array, exclusive: jax.Array, alpha) -> jax.Array:
  r"""The dynamic mask :math:`M(:, T_j) = -\alpha` for every :math:`T_j \perp T_{key}`.

  Args:
    span_id: int ``(B, S)`` subtask of each key position (``-1``: none).
    key: int ``(B,)`` the active subtask (``-1``: none yet, no mask).
    exclusive: bool ``(B, m, m)`` or ``(m, m)``.
    alpha: the mask strength.

  Returns:
    ``(B, S)`` float, ``-alpha`` on the keys of subtasks exclusive with ``key``.
  """
  _check_span_id(span_id)
  exclusive = jnp.asarray(exclusive, bool)
  m = exclusive.shape[-1]
  exclusive = jnp.broadcast_to(exclusive, (span_id.shape[0], m, m))
  row = jnp.take_along_axis(exclusive, jnp.clip(key, 0, m - 1)[:, None, None], axis=1)[:, 0]
  hit = jnp.take_along_axis(row, jnp.clip(span_id, 0, m - 1), axis=1)
  on = (span_id >= 0) & hit & (key[:, None] >= 0)
  return jnp.where(on, -jnp.asarray(alpha, jnp.float32), 0.0)


def active_scores(column_sums: jax.Array, span_id: jax.Array, t, num_spans: int) -> jax.Array:
  r""":math:`\mathrm{score}(T_i, t) = \frac{1}{|T_i|}\sum_{k\in T_i}\frac{1}{t-k}
  \sum_{k\le q\le t} A(q,k)` from the running column sums.

  Args:
    column_sums: ``(B, S)``, :math:`\sum_{q \le t} A(q, k)` (causal, so the sum starts at
      :math:`q = k`).
    span_id: int ``(B, S)``; keys at or after ``t`` must lie outside every span.
    t: the current query position (scalar).
    num_spans: ``m`` (static).

  Returns:
    ``(B, m)`` scores, 0 for an empty span.
  """
  _check_span_id(span_id)
  pos = jnp.arange(span_id.shape[-1])
  dist = jnp.maximum(t - pos, 1).astype(jnp.float32)
  onehot = (span_id[..., None] == jnp.arange(num_spans)).astype(jnp.float32)  # (B, S, m)
  total = jnp.einsum("bs,bsm->bm", column_sums / dist, onehot)
  return total / jnp.maximum(onehot.sum(1), 1.0)


def entropy_gate(scores: jax.Array, num_present: jax.Array):
  r"""The normalised scores, their entropy and the gate :math:`H < \tfrac12 \log m`.

  Args:
    scores: ``(B, m)`` non-negative scores (absent subtasks score 0).
    num_present: int ``(B,)``, the number ``m`` of subtasks in each row (a row with one
      subtask has nothing to switch between: its gate is always open).

  Returns:
    ``(p (B, m), entropy (B,), accept (B,) bool, argmax (B,))``.
  """
  p = scores / jnp.maximum(scores.sum(-1, keepdims=True), 1e-12)
  h = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), -1)
  accept = (h < 0.5 * jnp.log(jnp.maximum(num_present, 1).astype(jnp.float32))) | (
      num_present <= 1)
  return p, h, accept, jnp.argmax(scores, -1)


def update_key(prev: jax.Array, candidate: jax.Array, accept: jax.Array,
               structure: int) -> jax.Array:
  """The structure rules on a proposed switch ``prev -> candidate`` (``-1``: no key yet).

  Chain and Parallel only move forward (``candidate > prev``); Branch takes its first
  accepted choice and then locks. A switch the entropy gate refuses keeps ``prev``.
  """
  if structure not in (CHAIN, BRANCH, PARALLEL):
    raise ValueError(f"structure must be CHAIN, BRANCH or PARALLEL (0, 1, 2), got {structure!r}")
  allowed = (prev < 0) if structure == BRANCH else (candidate > prev)
  return jnp.where(accept & allowed, candidate, prev)


def head_scores(attention: jax.Array, query_span: jax.Array, span_id: jax.Array) -> jax.Array:
  """Each head's mean attention mass on the gold active span (our selection rule).

  Args:
    attention: ``(L, B, H, T, S)`` weights of a teacher-forced forward pass.
    query_span: int ``(B, T)``, the gold active subtask of each query (``-1``: not scored).
    span_id: int ``(B, S)``, the subtask of each key.

  Returns:
    ``(L, H)``: the mass :math:`\\sum_{k \\in T_{active(q)}} A(q, k)` averaged over the
    scored queries.
  """
  _check_span_id(query_span)
  _check_span_id(span_id)
  on = (query_span[:, :, None] >= 0) & (query_span[:, :, None] == span_id[:, None, :])
  mass = jnp.einsum("lbhts,bts->lhbt", attention, on.astype(attention.dtype))
  n = jnp.maximum(jnp.sum(query_span >= 0), 1)
  return jnp.sum(mass * (query_span >= 0), (2, 3)) / n


def select_heads(scores: jax.Array, k: int) -> jax.Array:
  """A 0/1 ``(L, H)`` float mask of the ``k`` highest-scoring heads (ties: lower index)."""
  scores = np.asarray(scores)
  if not isinstance(k, int | np.integer) or not 0 <= k <= scores.size:
    raise ValueError(f"k must be an int in [0, {scores.size}], got {k!r}")
  order = np.argsort(-scores.reshape(-1), kind="stable")[:k]
  out = np.zeros(scores.size, np.float32)
  out[order] = 1.0
  return jnp.asarray(out.reshape(scores.shape))


def random_heads(key: jax.Array, shape: tuple[int, int], k: int) -> jax.Array:
  """A 0/1 ``(L, H)`` mask of ``k`` heads drawn uniformly without replacement."""
  return select_heads(np.asarray(jax.random.uniform(key, shape)), k)


class ATAOutput(NamedTuple):
  """Greedy tokens ``(B, N)``, the key used for each step's dynamic mask ``(B, N)``
  (``-1``: none), the gate's entropy ``(B, N)``, and the final scores ``(B, m)``."""

  tokens: jax.Array
  keys: jax.Array
  entropy: jax.Array
  scores: jax.Array


def _steered_attention(q, k, v, *, mask, bias, start, state):
  """The ``attend`` hook: softmax attention with ``bias`` on the selected heads only
  (``state``: this layer's ``(H,)`` 0/1 selection). Its state out is the attention the
  heads would have paid without the bias, from which the active-subtask score is read
  (scoring the steered weights would lock the key: a masked subtask gets no attention)."""
  del start
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  plain = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  if bias is None:
    return jnp.einsum("bhts,bshd->bthd", plain.astype(q.dtype), v), plain
  w = jax.nn.softmax((logits + bias * state[None, :, None, None]).astype(jnp.float32), axis=-1)
  return jnp.einsum("bhts,bshd->bthd", w.astype(q.dtype), v), plain


class _Carry(NamedTuple):
  cache: object
  token: jax.Array  # (B,) last chosen token
  column_sums: jax.Array  # (B, S) sum over queries so far of the selected heads' attention
  key: jax.Array  # (B,) active subtask (-1: none)
  seps: jax.Array  # (B,) oracle separators generated so far (the oracle-key diagnostic)


def generate(net: Net, prompt: jax.Array, span_id: jax.Array, exclusive: jax.Array,
             heads: jax.Array, *, max_new: int, num_spans: int, alpha=ALPHA,
             structure: int = PARALLEL, mutual=True, dynamic=True, key_shift=0,
             oracle_sep=-1) -> ATAOutput:
  r"""Greedy decoding with ATA's masks on the selected heads.

  Args:
    net: a :class:`jaxlab.nn.Net` holding a :class:`~jaxlab.models.transformer.Transformer`.
    prompt: int ``(B, P)``.
    span_id: int ``(B, P)``, the gold subtask of each prompt position (``-1``: none).
    exclusive: bool ``(B, m, m)`` or ``(m, m)``, :math:`T_i \perp T_j`.
    heads: ``(L, H)`` 0/1 selection of the steered heads (all zeros: direct decoding; the
      scores then average every head).
    max_new: tokens to generate (static).
    num_spans: ``m``, the number of span slots (static).
    alpha: mask strength (traceable).
    structure: ``CHAIN``, ``BRANCH`` or ``PARALLEL`` (static).
    mutual: apply the mutual mask at prefill (traceable bool; the ablation drops it).
    dynamic: apply the dynamic mask at decode (traceable bool).
    key_shift: the "wrong key" ablation masks with key ``(T_key + key_shift) mod m``
      (traceable int; 0: the true key).
    oracle_sep: a diagnostic, not the paper's: when ``>= 0``, the key is the gold one of a
      Parallel answer, the number of ``oracle_sep`` tokens generated so far (capped at
      ``m - 1``), instead of the score (traceable int; ``-1``: the score).

  Returns:
    An :class:`ATAOutput`.
  """
  prompt = jnp.asarray(prompt)
  span_id = jnp.asarray(span_id)
  if prompt.ndim != 2 or span_id.shape != prompt.shape:
    raise ValueError(f"prompt and span_id must be (B, P) of one shape, got {prompt.shape} and "
                     f"{span_id.shape}")
  _check_span_id(span_id)
  if not isinstance(max_new, int) or max_new < 1:
    raise ValueError(f"max_new must be a positive int, got {max_new!r}")
  if not isinstance(num_spans, int) or num_spans < 1:
    raise ValueError(f"num_spans must be a positive int, got {num_spans!r}")
  if structure not in (CHAIN, BRANCH, PARALLEL):
    raise ValueError(f"structure must be CHAIN, BRANCH or PARALLEL (0, 1, 2), got {structure!r}")
  if not isinstance(alpha, jax.core.Tracer) and float(np.asarray(alpha)) < 0:
    raise ValueError(f"alpha must be >= 0, got {alpha!r}")
  exclusive = jnp.asarray(exclusive, bool)
  if exclusive.shape[-2:] != (num_spans, num_spans):
    raise ValueError(f"exclusive must end in (num_spans, num_spans) = ({num_spans}, "
                     f"{num_spans}), got {exclusive.shape}")
  exclusive = jnp.broadcast_to(exclusive, (prompt.shape[0], num_spans, num_spans))
  cfg = net.module().cfg
  if jnp.shape(heads) != (cfg.num_layers, cfg.num_heads):
    raise ValueError(f"heads must be (num_layers, num_heads) = ({cfg.num_layers}, "
                     f"{cfg.num_heads}), got {jnp.shape(heads)}")
  return _generate(net, prompt, span_id, exclusive, jnp.asarray(heads, jnp.float32),
                   jnp.asarray(alpha, jnp.float32), jnp.asarray(mutual, bool),
                   jnp.asarray(dynamic, bool), jnp.asarray(key_shift, jnp.int32),
                   jnp.asarray(oracle_sep, jnp.int32), max_new=max_new,
                   num_spans=num_spans, structure=structure)


@functools.partial(jax.jit, static_argnames=("max_new", "num_spans", "structure"))
def _generate(net, prompt, span_id, exclusive, heads, alpha, mutual, dynamic, key_shift,
              oracle_sep, *,
              max_new, num_spans, structure):
  module = net.module()
  b, p = prompt.shape
  s = p + max_new
  span_all = jnp.concatenate([span_id, jnp.full((b, max_new), -1, span_id.dtype)], 1)
  present = jnp.stack([jnp.any(span_id == i, 1) for i in range(num_spans)], 1)
  num_present = present.sum(1)
  weight = jnp.where(heads.sum() > 0, heads, jnp.ones_like(heads))
  weight = weight / weight.sum()

  def selected(w):  # (L, B, H, T, S) -> (B, T, S) averaged over the selected heads
    return jnp.einsum("lbhts,lh->bts", w, weight)

  def choose(carry_key, column_sums, t):
    scores = active_scores(column_sums, span_all, t, num_spans)
    _, h, accept, cand = entropy_gate(scores, num_present)
    return update_key(carry_key, cand, accept, structure), h, scores

  # Chain and Parallel are answered from their first subtask on; Branch starts with no key
  start_key = jnp.full((b,), -1 if structure == BRANCH else 0, jnp.int32)

  # prefill: the mutual mask, queries and keys in the prompt (Eq. A' = A + M)
  bias = mutual_bias(span_id, exclusive, alpha) * mutual
  # the prompt's last query writes the first answer token: it is decoding, under the
  # dynamic mask of the initial key
  used0 = jnp.where(start_key >= 0, (start_key + key_shift) % jnp.maximum(num_present, 1), -1)
  bias = bias.at[:, -1].add(dynamic_bias(span_id, used0, exclusive, alpha) * dynamic)
  bias = jnp.pad(bias, ((0, 0), (0, 0), (0, max_new)))[:, None]  # (B, 1, P, S)
  out = module.forward(prompt, cache=init_cache(module.cfg, b, s), bias=bias,
                       attend=_steered_attention, attend_state=heads)
  cols = selected(out.attend_state).sum(1)
  key, _, _ = choose(start_key, cols, p - 1)
  first = jnp.argmax(out.logits[:, -1], -1)

  def step(carry: _Carry, t):
    key = jnp.where(oracle_sep >= 0, jnp.minimum(carry.seps, num_present - 1), carry.key)
    used = jnp.where(key >= 0, (key + key_shift) % jnp.maximum(num_present, 1), -1)
    dyn = dynamic_bias(span_all, used, exclusive, alpha) * dynamic
    o = module.forward(carry.token[:, None], cache=carry.cache, bias=dyn[:, None, None],
                       attend=_steered_attention, attend_state=heads)
    cols = carry.column_sums + selected(o.attend_state)[:, 0]
    key, h, scores = choose(carry.key, cols, t)
    tok = jnp.argmax(o.logits[:, -1], -1)
    seps = carry.seps + (tok == oracle_sep)
    return _Carry(o.cache, tok, cols, key, seps), (carry.token, used, h, scores)

  init = _Carry(out.cache, first, cols, key, (first == oracle_sep).astype(jnp.int32))
  _, (tokens, keys, ent, scores) = jax.lax.scan(step, init, p + jnp.arange(max_new))
  return ATAOutput(tokens.T, keys.T, ent.T, scores[-1])
