r"""FreeKV: speculative retrieval of KV-cache pages with correction, at decode time.

At every decode step and layer, each (group of) head(s) attends over a budget of
``B`` cached tokens in pages of ``p``, not over the whole cache. For query heads ``h``,
step ``i``, cache pages ``j``:

.. math::
  k^{\max}_j = \max_{s \in j} k_s,\quad k^{\min}_j = \min_{s \in j} k_s
  \quad\text{(elementwise, per KV head: the page summaries)} \\
  s_{hj} = \sum_d \max(q_{hd}\, k^{\max}_{jd},\ q_{hd}\, k^{\min}_{jd})
  \quad\text{(Quest's bound on } \max_{s \in j} q_h \cdot k_s) \\
  S_{gj} = \frac{1}{G} \sum_{h \in g} \operatorname{softmax}_j(s_{hj} / \sqrt{D})
  \quad\text{(group-consistent scores)} \\
  \text{pages}_g(q) = \text{sink pages} \cup \text{recent pages} \cup
  \operatorname{top}_{B/p}(S_g) \quad\text{(} B/p \text{ pages in all)} \\
  C_{g,i} = \frac{1}{G} \sum_{h \in g} \cos(q_{i,h}, q_{i-1,h}); \qquad
  \text{step } i \text{ attends over }
  \begin{cases} \text{pages}_g(q_{i-1}) & C_{g,i} \ge \tau \text{ (speculative reuse)} \\
                \text{pages}_g(q_i) & C_{g,i} < \tau \text{ (correction)} \end{cases}

The pages of step ``i`` are selected with the previous step's query ``q_{i-1}`` (in the
paper that selection, and the recall of the pages from CPU memory, run in the background
during step ``i - 1``); a group whose query moved (cosine below ``tau``) reselects with
``q_i`` before attending, and if any group needs it the selection runs once for all
(:func:`freekv_step` runs it under ``lax.cond`` only then). ``tau = +inf`` is exact
per-step selection, ``tau = -inf`` reuse without correction; :data:`ARMS` names them.

What is the paper's and what is ours:

* Paper: Llama/Qwen models with grouped-query attention (``G`` query heads per KV head,
  the group of the scores above), page size 32, budget 2048, ``tau`` 0.8 or 0.9, the
  cache offloaded to CPU memory with double-buffered recall; its speed-up comes from
  hiding that recall behind compute.
* Ours: the selection rules above, as pure functions (:func:`page_summaries`,
  :func:`group_scores`, :func:`select_pages`, :func:`query_cosine`,
  :func:`freekv_step`) and a self-attention hook (:class:`FreeKVAttention`) that
  :func:`jaxlab.models.decoding.prefill` / ``decode_step`` drive. The cache stays in
  device memory (nothing is offloaded or recalled); the speculative selection for step
  ``i`` is computed at step ``i`` from ``q_{i-1}`` (the same pages the paper would have
  recalled: the summaries then include step ``i``'s own key, whose page is a recent page
  and always kept). Our transformer has as many KV heads as query heads, so a group is
  ``group_size`` consecutive heads sharing one selection (``1``: per head); with fewer
  KV heads (:func:`group_scores` takes any ``H_q / H_kv``) the paper's groups are the
  query heads of one KV head. The softmax temperature ``1 / sqrt(D)`` is ours (the
  attention's own). Prefill is dense (as in the paper).
* The page scoring and the attention over selected pages are Pallas kernels
  (:mod:`kernels_pallas.page_attention`), used when lowered for GPU/TPU; on CPU the jnp
  references (which gather only the selected pages) run.

Example:
  >>> hook = FreeKVAttention(FreeKVConfig(page_size=16, budget=128, tau=0.9))
  >>> logits, cache, state = decoding.prefill(net, prompt, max_len, attend=hook)
  >>> logits, cache, state = decoding.decode_step(net, tok, cache, attend=hook,
  ...                                             attend_state=state)
  >>> state.corrected            # (L, B, groups) bool: which groups reselected this step

References:
  Liu et al., "FreeKV: Boosting KV Cache Retrieval for Efficient LLM Inference",
  arXiv:2505.13109, 2025.
  Tang et al., "Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference",
  arXiv:2406.10774, 2024 (page summaries and the score bound).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxlab.models.transformer import attention
from kernels_pallas.page_attention import page_attention, page_scores

__all__ = ["ARMS", "FreeKVAttention", "FreeKVConfig", "FreeKVState", "freekv_step",
           "group_scores", "page_summaries", "query_cosine", "select_pages",
           "update_summaries", "with_knobs"]

# tau of each selection rule: exact per-step selection always "corrects", reuse never does
ARMS = {"exact": math.inf, "reuse": -math.inf}


@dataclasses.dataclass(frozen=True)
class FreeKVConfig:
  """Static settings (hashable: the hook is a jit static argument)."""

  page_size: int = 16  # tokens per page (the paper: 32)
  budget: int = 128  # tokens attended per group and step, sink and recent pages included
  sink_pages: int = 1  # the first pages, always kept
  recent_pages: int = 1  # the last filled pages (the current one included), always kept
  group_size: int = 1  # consecutive query heads sharing one selection
  tau: float = 0.9  # correction threshold on the group-mean query cosine (+inf: exact)
  use_kernel: bool | None = None  # None: Pallas on GPU/TPU, jnp elsewhere

  def __post_init__(self):
    for name in ("page_size", "budget", "group_size"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    for name in ("sink_pages", "recent_pages"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if self.budget % self.page_size:
      raise ValueError(f"budget must be a multiple of page_size = {self.page_size}, got "
                       f"{self.budget}")
    if self.num_select < max(1, self.sink_pages + self.recent_pages):
      raise ValueError(f"budget / page_size = {self.num_select} pages must cover "
                       f"sink_pages + recent_pages = {self.sink_pages + self.recent_pages} "
                       "(and be >= 1)")
    if isinstance(self.tau, bool) or not isinstance(self.tau, (int, float)):
      raise TypeError(f"tau must be a float (inf: exact selection), got {self.tau!r}")
    if self.use_kernel is not None and not isinstance(self.use_kernel, bool):
      raise TypeError(f"use_kernel must be a bool or None, got {self.use_kernel!r}")

  @property
  def num_select(self) -> int:
    """Pages attended per group and step."""
    return self.budget // self.page_size


class FreeKVState(NamedTuple):
  """One layer's decode state (stacked over layers by the transformer: leading ``L``).

  ``tau`` and ``num_select`` start at the config's values and may be replaced with traced
  ones (:func:`with_knobs`), so one compiled decode step serves several arms.
  """

  q_prev: jax.Array  # (B, H, D) float32: the previous step's query
  kmax: jax.Array  # (B, H_kv, P, D): elementwise max key of each page (filled tokens)
  kmin: jax.Array  # (B, H_kv, P, D): elementwise min key
  tau: jax.Array  # float32 scalar: correction threshold
  num_select: jax.Array  # int32 scalar: pages attended per group (<= config.num_select)
  corrected: jax.Array  # (B, groups) bool: reselected with q_i at this step
  attended: jax.Array  # (B, groups) int32: pages attended at this step
  cosine: jax.Array  # (B, groups) float32: this step's group-mean cos(q_i, q_{i-1})


def with_knobs(state: FreeKVState, tau=None, num_select=None) -> FreeKVState:
  """``state`` (any leading axes) with ``tau`` and / or ``num_select`` replaced (traced ok;
  ``num_select`` must not exceed the config's ``budget / page_size``)."""
  if tau is not None:
    state = state._replace(tau=jnp.full_like(state.tau, tau))
  if num_select is not None:
    state = state._replace(num_select=jnp.full_like(state.num_select, num_select))
  return state


# ---------------------------------------------------------------- the pieces
def page_summaries(k: jax.Array, length: jax.Array, page_size: int
                   ) -> tuple[jax.Array, jax.Array]:
  """Elementwise max and min key of each page over the filled tokens.

  Args:
    k: ``(B, S, H, D)`` keys (the cache layout), ``S`` a multiple of ``page_size``.
    length: int scalar, tokens filled (positions ``>= length`` are ignored).
    page_size: tokens per page.

  Returns:
    ``(kmax, kmin)``, each ``(B, H, S / page_size, D)``; pages with no filled token hold 0.
  """
  b, s, h, d = k.shape
  filled = (jnp.arange(s) < length)[None, :, None, None]
  paged = lambda x: x.reshape(b, s // page_size, page_size, h, d)
  big = jnp.finfo(k.dtype).max
  kmax = jnp.max(paged(jnp.where(filled, k, -big)), axis=2)
  kmin = jnp.min(paged(jnp.where(filled, k, big)), axis=2)
  any_filled = (jnp.arange(s // page_size) * page_size < length)[None, :, None, None]
  head_major = lambda x: jnp.where(any_filled, x, 0).swapaxes(1, 2)
  return head_major(kmax), head_major(kmin)


def update_summaries(kmax: jax.Array, kmin: jax.Array, k_new: jax.Array, position: jax.Array,
                     page_size: int) -> tuple[jax.Array, jax.Array]:
  """The summaries after writing ``k_new (B, H, D)`` at ``position``: its page's max and
  min absorb it (a page's first token replaces them)."""
  page = position // page_size
  first = position % page_size == 0
  old_max = lax.dynamic_index_in_dim(kmax, page, axis=2, keepdims=False)
  old_min = lax.dynamic_index_in_dim(kmin, page, axis=2, keepdims=False)
  new_max = jnp.where(first, k_new, jnp.maximum(old_max, k_new)).astype(kmax.dtype)
  new_min = jnp.where(first, k_new, jnp.minimum(old_min, k_new)).astype(kmin.dtype)
  return (lax.dynamic_update_index_in_dim(kmax, new_max, page, axis=2),
          lax.dynamic_update_index_in_dim(kmin, new_min, page, axis=2))


def group_scores(q: jax.Array, kmax: jax.Array, kmin: jax.Array, length: jax.Array, *,
                 page_size: int, group_size: int, use_kernel: bool | None = None) -> jax.Array:
  """Group-consistent page scores ``S (B, H_q / group_size, P)``.

  Args:
    q: ``(B, H_q, D)`` queries.
    kmax, kmin: ``(B, H_kv, P, D)`` page summaries, ``H_kv`` dividing ``H_q`` (query head
      ``h`` reads KV head ``h // (H_q / H_kv)``).
    length: int scalar, tokens filled: pages from ``ceil(length / page_size)`` on score 0.
    page_size: tokens per page.
    group_size: consecutive query heads pooled (dividing ``H_q``).
    use_kernel: the page-score kernel (None: by platform).

  Returns:
    Per group, the mean over its heads of the softmax over filled pages of ``s / sqrt(D)``
    (each row sums to 1 over the filled pages).
  """
  b, hq, d = q.shape
  hk, p = kmax.shape[1], kmax.shape[2]
  if hq % hk or hq % group_size:
    raise ValueError(f"KV heads ({hk}) and group_size ({group_size}) must divide the query "
                     f"heads ({hq})")
  rep = hq // hk
  if rep > 1:
    kmax, kmin = jnp.repeat(kmax, rep, axis=1), jnp.repeat(kmin, rep, axis=1)
  s = page_scores(q.astype(kmax.dtype), kmax, kmin, use_kernel=use_kernel)  # (B, H_q, P)
  filled = jnp.arange(p) * page_size < length
  probs = jax.nn.softmax(jnp.where(filled, s / math.sqrt(d), -jnp.inf), axis=-1)
  return jnp.mean(probs.reshape(b, hq // group_size, group_size, p), axis=2)


def select_pages(scores: jax.Array, length: jax.Array, num_select, *, page_size: int,
                 max_select: int, sink_pages: int, recent_pages: int
                 ) -> tuple[jax.Array, jax.Array]:
  """Top pages per group, sink and recent pages always kept.

  Args:
    scores: ``(..., P)`` group scores in ``[0, 1]`` (:func:`group_scores`).
    length: int scalar, tokens filled; ``ceil(length / page_size)`` pages are filled.
    num_select: pages to attend (int, traced ok, ``<= max_select``).
    page_size: tokens per page.
    max_select: static bound on ``num_select`` (the lists' length).
    sink_pages, recent_pages: the first and the last filled pages kept whatever their score.

  Returns:
    ``(pages (..., n), count (...))`` with ``n = min(max_select, P)``: the kept pages first
    (sink and recent, then by descending score), ``count = min(num_select, filled pages)``
    of them live; later entries are filler.
  """
  p = scores.shape[-1]
  n = min(max_select, p)
  idx = jnp.arange(p)
  filled_pages = (length + page_size - 1) // page_size
  filled = idx < filled_pages
  forced = filled & ((idx < sink_pages) | (idx >= filled_pages - recent_pages))
  key = jnp.where(forced, 2.0, jnp.where(filled, scores, -1.0))  # scores lie in [0, 1]
  _, pages = lax.top_k(key, n)
  count = jnp.minimum(jnp.minimum(num_select, n), filled_pages)
  return pages.astype(jnp.int32), jnp.broadcast_to(count, scores.shape[:-1]).astype(jnp.int32)


def query_cosine(q: jax.Array, q_prev: jax.Array, group_size: int) -> jax.Array:
  """``C (B, H / group_size)``: per group, the mean over its heads of ``cos(q, q_prev)``
  (``q, q_prev (B, H, D)``; a zero vector has cosine 0)."""
  q, q_prev = q.astype(jnp.float32), q_prev.astype(jnp.float32)
  num = jnp.sum(q * q_prev, -1)
  den = jnp.linalg.norm(q, axis=-1) * jnp.linalg.norm(q_prev, axis=-1)
  cos = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)
  b, h = cos.shape
  return jnp.mean(cos.reshape(b, h // group_size, group_size), axis=-1)


def freekv_step(cfg: FreeKVConfig, q: jax.Array, k: jax.Array, v: jax.Array,
                position: jax.Array, state: FreeKVState) -> tuple[jax.Array, FreeKVState]:
  """One decode step of one layer.

  Args:
    cfg: the static settings.
    q: ``(B, H, D)`` this step's queries.
    k, v: ``(B, S, H, D)`` the layer's cache with this step's key and value written at
      ``position``.
    position: int scalar, this token's slot (``length = position + 1`` tokens filled).
    state: the layer's :class:`FreeKVState` after the previous step (or the prefill).

  Returns:
    ``(y (B, H, D), new state)``: attention over each group's pages; the state holds
    ``q`` as the next step's previous query, the updated summaries, which groups
    reselected with ``q`` and how many pages they attended.
  """
  b, h, d = q.shape
  g = cfg.group_size
  length = position + 1
  k_new = lax.dynamic_index_in_dim(k, position, axis=1, keepdims=False)  # (B, H, D)
  kmax, kmin = update_summaries(state.kmax, state.kmin, k_new, position, cfg.page_size)

  def select(query):
    scores = group_scores(query, kmax, kmin, length, page_size=cfg.page_size, group_size=g,
                          use_kernel=cfg.use_kernel)
    return select_pages(scores, length, state.num_select, page_size=cfg.page_size,
                        max_select=cfg.num_select, sink_pages=cfg.sink_pages,
                        recent_pages=cfg.recent_pages)

  speculative = select(state.q_prev)  # the pages recalled for this step with q_{i-1}
  cosine = query_cosine(q, state.q_prev, g)  # (B, groups)
  corrected = cosine < state.tau
  # correction: one selection with q_i for every group, only when some group needs it
  current = lax.cond(jnp.any(corrected), select, lambda _: speculative, q)
  pages, count = (jnp.where(corrected[..., None], current[0], speculative[0]),
                  jnp.where(corrected, current[1], speculative[1]))
  per_head = lambda x: jnp.repeat(x, g, axis=1)  # the group's selection for each head
  y = page_attention(q, k, v, per_head(pages), per_head(count), length.astype(jnp.int32),
                     page_size=cfg.page_size, use_kernel=cfg.use_kernel, kv_layout="bshd")
  new = state._replace(q_prev=q.astype(jnp.float32), kmax=kmax, kmin=kmin,
                       corrected=corrected, attended=count, cosine=cosine)
  return y, new


@dataclasses.dataclass(frozen=True)
class FreeKVAttention:
  """The self-attention hook of :meth:`jaxlab.models.transformer.Transformer.forward`.

  Called with ``state=None`` (a prefill) it attends densely, exactly as without a hook,
  and returns the layer's initial :class:`FreeKVState` (summaries of the prompt's keys,
  the last prompt position's query). With a state it runs :func:`freekv_step` on the one
  new token. Causality comes from the cache length: a ``mask`` beyond the causal one is
  not applied at decode steps, and a ``bias`` is refused.
  """

  config: FreeKVConfig = FreeKVConfig()

  def __call__(self, q, k, v, *, mask, bias, start, state):
    cfg = self.config
    b, t, h, d = q.shape
    if k.shape[1] % cfg.page_size:
      raise ValueError(f"the cache's max_len ({k.shape[1]}) must be a multiple of "
                       f"page_size = {cfg.page_size}")
    if h % cfg.group_size:
      raise ValueError(f"group_size = {cfg.group_size} must divide the heads ({h})")
    if bias is not None:
      raise ValueError("FreeKVAttention takes no attention bias")
    if state is None:  # prefill: dense attention, the initial state
      y = attention(q, k, v, mask=mask, bias=bias)
      kmax, kmin = page_summaries(k, start + t, cfg.page_size)
      groups = h // cfg.group_size
      return y, FreeKVState(q[:, -1].astype(jnp.float32), kmax, kmin,
                            jnp.float32(cfg.tau), jnp.int32(cfg.num_select),
                            jnp.zeros((b, groups), bool), jnp.zeros((b, groups), jnp.int32),
                            jnp.zeros((b, groups), jnp.float32))
    if t != 1:
      raise ValueError(f"FreeKV decodes one token per step, got {t}")
    y, new = freekv_step(cfg, q[:, 0], k, v, start, state)
    return y[:, None].astype(q.dtype), new
