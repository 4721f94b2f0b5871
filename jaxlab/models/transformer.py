r"""A small decoder-only transformer in flax nnx that methods can open up.

Token embedding, ``num_layers`` pre-LayerNorm blocks, a final LayerNorm and an
untied output head (GPT-2's layout):

.. math::
  h_0 &= E[x]\ (+\, P_{\mathrm{pos}} \text{ for learned positions}) \\
  h_{l+1}' &= h_l + W_O\,(s_l \odot \mathrm{Attn}_l(\mathrm{LN}(h_l)))
      \quad\text{(multi-head, RoPE on } q, k\text{, causal by default)} \\
  h_{l+1}'' &= h_{l+1}' + \mathrm{CrossAttn}_l(\mathrm{LN}(h_{l+1}'), c)
      \quad\text{(optional, to a context sequence } c\text{)} \\
  h_{l+1} &= h_{l+1}'' + \mathrm{FFN}_l(\mathrm{LN}(h_{l+1}''))
      \quad\text{(dense MLP, or a top-}k\text{ mixture of experts)} \\
  \mathrm{logits} &= W_{\mathrm{out}}\,\mathrm{LN}(h_L)

What a method can reach, per call of :meth:`Transformer.forward`:

* ``positions``: RoPE positions as an array, ``(..., T)`` or ``(..., T, A)`` for
  ``A``-axis RoPE (``TransformerConfig.rope_sections`` splits the rotary pairs
  among the axes, as video models' 3-axis RoPE does; ``TransformerConfig.rope_axes``
  instead names the axis of every rotary pair, e.g. Lumos-1's interleaved MM-RoPE);
  default ``0..T-1`` (after the cache's length when decoding).
* ``mask`` (bool, True = attend) and ``bias`` (additive), each broadcastable to
  ``(batch, heads, T, S)``, combined with the causal mask (``causal=False``
  drops it: bidirectional or block-bidirectional attention given by ``mask``).
* ``head_scale``: ``head_scale[l]`` multiplies layer ``l``'s per-head outputs
  ``(batch, T, heads, head_dim)`` before ``W_O`` (broadcast: ``(L, H, 1)``
  scales heads, ``(L, H, head_dim)`` channels of heads).
* ``return_hidden`` / ``return_attention``: the residual stream after the
  embedding and after every block ``(L + 1, batch, T, d)`` and every layer's
  attention weights ``(L, batch, H, T, S)``.
* ``context`` (and ``context_mask``) for cross-attention, when the config has
  ``cross_attention=True``; with ``return_attention`` the cross-attention weights come
  back too, ``(L, batch, H, T, S_context)`` in :attr:`DecoderOutput.cross_attention`.
* ``embeddings``: ``(..., T, d_model)`` input vectors in place of ``tokens`` (the token
  embedding is skipped; positions, masks and everything else are as for tokens): a
  diffusion transformer feeds its embedded image patches this way.
* ``cache``: a :class:`KVCache` (:func:`init_cache`); the call writes its keys and
  values at the cache's length and returns the grown cache
  (:mod:`jaxlab.models.decoding` drives it).
* ``attend`` / ``attend_state`` (with a cache): a hook that replaces every layer's
  self-attention, ``attend(q, k, v, *, mask, bias, start, state) -> (y, new_state)``
  with ``q (B, T, H, D)``, the layer's whole cache ``k, v (B, S, H, D)`` (this call's keys
  already written), the combined mask and bias, ``start`` (the cache length before the
  call) and ``state``, layer ``l``'s slice of ``attend_state`` (a pytree with a leading
  layer axis, or None). The new states come back stacked over layers in
  :attr:`DecoderOutput.attend_state`. Default None: attention as without it
  (``jaxlab.inference.freekv``'s page-selected attention is such a hook).

MoE layers (``num_experts > 0``) return their router probabilities and the
Switch-Transformer load-balancing loss (summed over MoE layers) in
:class:`DecoderOutput`. Attention goes through ``jax.nn.dot_product_attention``
unless the weights are asked for, which computes the same softmax explicitly.

Weights are initialized ``N(0, 0.02^2)`` (GPT-2), so the logits start near zero
and the next-token loss at initialization is close to ``log(vocab_size)``.
Training loops hold the parameters as a plain pytree through
:class:`jaxlab.nn.Net` (static graph + params), e.g. under ``lax.scan`` over
steps and ``jax.vmap`` over seeds or hyperparameters. :func:`graph` gives the graph
without initializing parameters (inside a jitted program the parameters come from
:func:`create`); :func:`fit_next_token` trains a fresh model on the next-token loss with
:func:`jaxlab.training.fit` (the language-model experiments' shared training program).

Example:
  >>> cfg = TransformerConfig(vocab_size=64, d_model=32, num_heads=2, num_layers=2, seq_len=32)
  >>> net = Net.create(Transformer(cfg, rngs=nnx.Rngs(0)))
  >>> tokens = jnp.zeros((4, 33), jnp.int32)
  >>> loss = next_token_loss(net, tokens)            # with net.params
  >>> grads = jax.grad(lambda p: next_token_loss(net.replace(params=p), tokens))(net.params)
  >>> out = net.module().forward(tokens, return_attention=True)   # logits + attention maps

References:
  Vaswani et al., "Attention Is All You Need", arXiv:1706.03762, 2017.
  Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019.
  Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding",
  arXiv:2104.09864, 2021.
  Fedus, Zoph, Shazeer, "Switch Transformers", arXiv:2101.03961, 2021 (load balancing).
  Jiang et al., "Mixtral of Experts", arXiv:2401.04088, 2024 (top-k gates renormalized).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx, struct

from jaxlab.nn import Net
from jaxlab.training.fit import fit, minibatch_sampler

INIT_STD = 0.02  # GPT-2's initializer scale
POSITIONS = ("rope", "learned", "none")


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Static shape of the model (hashable, so it can be a jit static argument)."""

  vocab_size: int  # number of token ids
  d_model: int  # residual width
  num_heads: int  # attention heads; must divide d_model
  num_layers: int  # transformer blocks
  seq_len: int  # context trained on; the hard limit only for learned positions
  mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model
  positions: str = "rope"  # "rope", "learned" (GPT-2; TREC's setting) or "none"
  rope_base: float = 10_000.0  # RoPE frequency base
  rope_sections: tuple[int, ...] | None = None  # rotary pairs per position axis (sum: head_dim/2)
  rope_axes: tuple[int, ...] | None = None  # position axis of each rotary pair (head_dim/2 ints)
  num_experts: int = 0  # 0: dense MLPs; > 0: every layer's MLP is a mixture of experts
  experts_per_token: int = 2  # top-k routing (capped at num_experts)
  renormalize_gates: bool = True  # top-k gates sum to 1 (Mixtral); False: raw router probs
  cross_attention: bool = False  # a cross-attention sublayer per block
  context_dim: int | None = None  # width of the context sequence (default d_model)

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "num_heads", "num_layers", "seq_len", "mlp_ratio",
                 "experts_per_token"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(self.num_experts, int) or self.num_experts < 0:
      raise ValueError(f"num_experts must be an int >= 0, got {self.num_experts!r}")
    if self.d_model % self.num_heads:
      raise ValueError(f"num_heads must divide d_model, got d_model={self.d_model}, "
                       f"num_heads={self.num_heads}")
    if self.positions not in POSITIONS:
      raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
    if self.positions == "rope":
      if self.head_dim % 2:
        raise ValueError(f"RoPE needs an even head_dim, got {self.head_dim}")
      if self.rope_sections is not None and (
          not all(isinstance(s, int) and s >= 1 for s in self.rope_sections)
          or sum(self.rope_sections) != self.head_dim // 2):
        raise ValueError(f"rope_sections must be positive ints summing to head_dim / 2 = "
                         f"{self.head_dim // 2}, got {self.rope_sections!r}")
      if self.rope_axes is not None:
        if self.rope_sections is not None:
          raise ValueError("give rope_sections or rope_axes, not both")
        axes = self.rope_axes
        if (not isinstance(axes, tuple) or len(axes) != self.head_dim // 2
            or not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in axes)
            or set(axes) != set(range(max(axes) + 1))):
          raise ValueError(f"rope_axes must be a tuple of head_dim / 2 = {self.head_dim // 2} "
                           f"ints naming axes 0..A-1 (each used), got {axes!r}")
    if self.context_dim is not None and (not isinstance(self.context_dim, int)
                                         or self.context_dim < 1):
      raise ValueError(f"context_dim must be a positive int or None, got {self.context_dim!r}")

  @property
  def head_dim(self) -> int:
    return self.d_model // self.num_heads

  @property
  def rope_num_axes(self) -> int | None:
    """Number of position axes of multi-axis RoPE (None: 1-D positions)."""
    if self.rope_sections is not None:
      return len(self.rope_sections)
    if self.rope_axes is not None:
      return max(self.rope_axes) + 1
    return None


class KVCache(struct.PyTreeNode):
  """Keys and values of every layer, ``(L, batch, max_len, heads, head_dim)``, and the
  number of filled slots ``length`` (one for the batch: prompts share a length)."""

  k: jax.Array
  v: jax.Array
  length: jax.Array  # int32 scalar

  @property
  def max_len(self) -> int:
    return self.k.shape[2]


class DecoderOutput(NamedTuple):
  """What :meth:`Transformer.forward` returns; fields not asked for are None."""

  logits: jax.Array  # (..., T, vocab_size)
  cache: KVCache | None = None  # the grown cache, when one was given
  hidden: jax.Array | None = None  # (L + 1, ..., T, d_model) residual stream
  attention: jax.Array | None = None  # (L, ..., H, T, S) attention weights
  router_probs: jax.Array | None = None  # (L, ..., T, num_experts), MoE only
  aux_loss: jax.Array | None = None  # Switch load-balancing loss summed over layers, MoE only
  attend_state: object = None  # the attention hook's per-layer states (leading axis L)
  cross_attention: jax.Array | None = None  # (L, ..., H, T, S_context), with return_attention


def init_cache(cfg: TransformerConfig, batch: int, max_len: int,
               dtype: jnp.dtype = jnp.float32) -> KVCache:
  """An empty :class:`KVCache` for ``batch`` sequences of at most ``max_len`` tokens."""
  if not isinstance(batch, int) or batch < 1 or not isinstance(max_len, int) or max_len < 1:
    raise ValueError(f"batch and max_len must be positive ints, got {batch!r}, {max_len!r}")
  if cfg.positions == "learned" and max_len > cfg.seq_len:
    raise ValueError(f"max_len={max_len} exceeds seq_len={cfg.seq_len} (learned positions)")
  shape = (cfg.num_layers, batch, max_len, cfg.num_heads, cfg.head_dim)
  return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype), jnp.zeros((), jnp.int32))


# ---------------------------------------------------------------- pieces
def rope(x: jax.Array, positions: jax.Array, base: float = 10_000.0,
         sections: tuple[int, ...] | None = None,
         axes: tuple[int, ...] | None = None) -> jax.Array:
  """Rotary position embedding of ``x (..., T, H, D)`` at ``positions``.

  ``positions`` is ``(..., T)``, or ``(..., T, A)`` with ``sections`` (ints summing
  to ``D / 2``) giving how many rotary pairs each of the ``A`` axes drives (contiguous:
  the first ``sections[0]`` pairs follow axis 0, ...), or with ``axes`` (``D / 2`` ints)
  naming the axis of every pair (any interleaving, e.g. Lumos-1's MM-RoPE). Pair
  ``i`` has frequency ``base ** (-2 i / D)`` and pairs dimension ``i`` with
  ``i + D / 2`` (the "rotate half" layout).
  """
  d = x.shape[-1]
  inv_freq = base ** (-jnp.arange(0, d, 2, dtype=jnp.float32) / d)  # (D/2,)
  pos = jnp.asarray(positions, jnp.float32)
  if sections is not None and axes is not None:
    raise ValueError("give sections or axes, not both")
  if sections is None and axes is None:
    angle = pos[..., None] * inv_freq  # (..., T, D/2)
  else:
    if axes is None:
      axis = np.repeat(np.arange(len(sections)), sections)  # position axis of each pair
    else:
      axis = np.asarray(axes)
      if axis.shape != (d // 2,):
        raise ValueError(f"axes must name the axis of each of the {d // 2} pairs, got "
                         f"{len(axis)}")
    if pos.shape[-1] != int(axis.max()) + 1:
      raise ValueError(f"positions has {pos.shape[-1]} axes, the rope layout "
                       f"{int(axis.max()) + 1}")
    angle = jnp.take(pos, axis, axis=-1) * inv_freq
  cos, sin = jnp.cos(angle)[..., None, :], jnp.sin(angle)[..., None, :]  # over heads
  x1, x2 = x[..., : d // 2], x[..., d // 2:]
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(x.dtype)


def attention(q: jax.Array, k: jax.Array, v: jax.Array, *, mask: jax.Array | None = None,
              bias: jax.Array | None = None, return_weights: bool = False):
  """Softmax attention ``(B, T, H, D) x (B, S, H, D) -> (B, T, H, D)``.

  ``mask`` (True = attend) and ``bias`` broadcast to ``(B, H, T, S)``. Without weights
  it is ``jax.nn.dot_product_attention``; with them the same computation written out
  (masked logits set to the dtype's minimum, as XLA's implementation does), returning
  ``(out, weights (B, H, T, S))``.
  """
  b, t, h, _ = q.shape
  s = k.shape[1]
  mask = None if mask is None else jnp.broadcast_to(mask, (b, h, t, s))
  bias = None if bias is None else jnp.broadcast_to(bias, (b, h, t, s)).astype(q.dtype)
  if not return_weights:
    return jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask)
  logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
  if bias is not None:
    logits = logits + bias
  if mask is not None:
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
  weights = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(q.dtype)
  return jnp.einsum("bhts,bshd->bthd", weights, v), weights


def _linear(a: int, b: int, rngs: nnx.Rngs, use_bias: bool = True) -> nnx.Linear:
  return nnx.Linear(a, b, kernel_init=nnx.initializers.normal(INIT_STD), use_bias=use_bias,
                    rngs=rngs)


class BlockContext(NamedTuple):
  """Per-call inputs every block sees (built once in :meth:`Transformer.forward`; a method
  that runs `model.blocks` itself, such as CoCoMix's interleaving, builds one)."""

  positions: jax.Array | None
  mask: jax.Array | None  # (B, 1|H, T, S) bool
  bias: jax.Array | None
  context: jax.Array | None
  context_mask: jax.Array | None
  return_attention: bool
  attend: Callable | None = None  # self-attention hook (Transformer.forward's `attend`)
  attend_state: object = None  # this layer's slice of the hook's state


class CausalSelfAttention(nnx.Module):
  """Multi-head self-attention with RoPE, a per-call mask / bias and an optional cache.

  (The name is kept from the causal-only version; causality now comes from the mask
  :meth:`Transformer.forward` builds.)
  """

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.num_heads = cfg.num_heads
    self.rope = cfg.positions == "rope"
    self.rope_base = cfg.rope_base
    self.rope_sections = cfg.rope_sections
    self.rope_axes = cfg.rope_axes
    self.qkv = _linear(cfg.d_model, 3 * cfg.d_model, rngs)
    self.out = _linear(cfg.d_model, cfg.d_model, rngs)

  def __call__(self, x: jax.Array, ctx: BlockContext, cache=None, head_scale=None):
    b, t, d = x.shape
    q, k, v = jnp.split(self.qkv(x).reshape(b, t, 3, self.num_heads, d // self.num_heads), 3,
                        axis=2)
    q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
    if self.rope:
      q = rope(q, ctx.positions, self.rope_base, self.rope_sections, self.rope_axes)
      k = rope(k, ctx.positions, self.rope_base, self.rope_sections, self.rope_axes)
    new_kv = None
    if cache is not None:  # (k_all, v_all, length): write this call's keys at `length`
      k_all, v_all, length = cache
      k_all = jax.lax.dynamic_update_slice_in_dim(k_all, k.astype(k_all.dtype), length, 1)
      v_all = jax.lax.dynamic_update_slice_in_dim(v_all, v.astype(v_all.dtype), length, 1)
      new_kv, k, v = (k_all, v_all), k_all, v_all
    if ctx.attend is not None:  # the hook's new state travels in the weights' slot
      y, weights = ctx.attend(q, k, v, mask=ctx.mask, bias=ctx.bias, start=length,
                              state=ctx.attend_state)
    else:
      y = attention(q, k, v, mask=ctx.mask, bias=ctx.bias, return_weights=ctx.return_attention)
      y, weights = y if ctx.return_attention else (y, None)
    if head_scale is not None:
      y = y * head_scale
    return self.out(y.reshape(b, t, d)), new_kv, weights


class CrossAttention(nnx.Module):
  """Multi-head attention from the sequence to a context ``(B, S, context_dim)``."""

  def __init__(self, d_model: int, context_dim: int, num_heads: int, *, rngs: nnx.Rngs):
    self.num_heads = num_heads
    self.q = _linear(d_model, d_model, rngs)
    self.kv = _linear(context_dim, 2 * d_model, rngs)
    self.out = _linear(d_model, d_model, rngs)

  def __call__(self, x: jax.Array, context: jax.Array, mask: jax.Array | None = None,
               return_weights: bool = False):
    """``(B, T, d)`` outputs; with ``return_weights``, ``(outputs, weights (B, H, T, S))``."""
    b, t, d = x.shape
    hd = d // self.num_heads
    q = self.q(x).reshape(b, t, self.num_heads, hd)
    k, v = jnp.split(self.kv(context).reshape(b, context.shape[1], 2, self.num_heads, hd), 2,
                     axis=2)
    y = attention(q, k[:, :, 0], v[:, :, 0], mask=mask, return_weights=return_weights)
    if return_weights:
      y, weights = y
      return self.out(y.reshape(b, t, d)), weights
    return self.out(y.reshape(b, t, d))


class MoEFeedForward(nnx.Module):
  """Top-k mixture of GELU MLP experts (every expert evaluated densely: small E).

  Returns ``(y, router_probs, load_balancing_loss)``, the loss Switch's
  ``E * sum_e f_e P_e`` with ``f_e`` the share of the top-k assignments going to
  expert ``e`` and ``P_e`` its mean router probability (1 when perfectly balanced).
  """

  def __init__(self, d_model: int, hidden: int, num_experts: int, k: int, renormalize: bool,
               *, rngs: nnx.Rngs):
    init = nnx.initializers.normal(INIT_STD)
    self.k, self.renormalize = min(k, num_experts), renormalize
    self.router = _linear(d_model, num_experts, rngs, use_bias=False)
    self.w_in = nnx.Param(init(rngs.params(), (num_experts, d_model, hidden)))
    self.b_in = nnx.Param(jnp.zeros((num_experts, hidden)))
    self.w_out = nnx.Param(init(rngs.params(), (num_experts, hidden, d_model)))
    self.b_out = nnx.Param(jnp.zeros((num_experts, d_model)))

  def __call__(self, x: jax.Array):
    probs = jax.nn.softmax(self.router(x).astype(jnp.float32), axis=-1)
    top_p, top_i = jax.lax.top_k(probs, self.k)
    if self.renormalize:
      top_p = top_p / jnp.sum(top_p, -1, keepdims=True)
    assign = jax.nn.one_hot(top_i, probs.shape[-1], dtype=probs.dtype)  # (..., k, E)
    gates = jnp.einsum("...k,...ke->...e", top_p, assign).astype(x.dtype)
    h = jax.nn.gelu(jnp.einsum("...d,edh->...eh", x, self.w_in[...]) + self.b_in[...])
    y = jnp.einsum("...eh,ehd,...e->...d", h, self.w_out[...], gates)
    y = y + gates @ self.b_out[...]
    e = probs.shape[-1]
    frac = jnp.mean(jnp.sum(assign, -2).reshape(-1, e), 0) / self.k
    aux = e * jnp.sum(frac * jnp.mean(probs.reshape(-1, e), 0))
    return y, probs, aux


class Block(nnx.Module):
  """Pre-LN block: self-attention, optional cross-attention, then a dense or MoE MLP."""

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.ln1 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.attn = CausalSelfAttention(cfg, rngs=rngs)
    self.ln2 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    hidden = cfg.mlp_ratio * cfg.d_model
    self.use_moe, self.use_cross = cfg.num_experts > 0, cfg.cross_attention
    if self.use_moe:
      self.moe = MoEFeedForward(cfg.d_model, hidden, cfg.num_experts, cfg.experts_per_token,
                                cfg.renormalize_gates, rngs=rngs)
    else:
      self.fc = _linear(cfg.d_model, hidden, rngs)
      self.proj = _linear(hidden, cfg.d_model, rngs)
    if self.use_cross:
      self.ln_c = nnx.LayerNorm(cfg.d_model, rngs=rngs)
      self.cross = CrossAttention(cfg.d_model, cfg.context_dim or cfg.d_model, cfg.num_heads,
                                  rngs=rngs)

  def __call__(self, x: jax.Array, ctx: BlockContext, cache=None, head_scale=None):
    """``(x, new_kv, self-attention weights, router probs, aux loss, cross-attention
    weights)``; the weights are None unless ``ctx.return_attention``."""
    a, new_kv, weights = self.attn(self.ln1(x), ctx, cache, head_scale)
    x = x + a
    cross_w = None
    if self.use_cross:
      c = self.cross(self.ln_c(x), ctx.context, ctx.context_mask,
                     return_weights=ctx.return_attention)
      c, cross_w = c if ctx.return_attention else (c, None)
      x = x + c
    if not self.use_moe:
      return (x + self.proj(jax.nn.gelu(self.fc(self.ln2(x)))), new_kv, weights, None, None,
              cross_w)
    y, probs, aux = self.moe(self.ln2(x))
    return x + y, new_kv, weights, probs, aux, cross_w


class Transformer(nnx.Module):
  """Decoder LM: ``int tokens (..., T) -> logits (..., T, vocab_size)``.

  ``model(tokens, **kwargs)`` returns the logits; :meth:`forward` everything else.

  Args:
    cfg: the model's :class:`TransformerConfig`.
    rngs: ``nnx.Rngs`` for the initializers.
  """

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    init = nnx.initializers.normal(INIT_STD)
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=init, rngs=rngs)
    if cfg.positions == "learned":
      self.pos = nnx.Param(init(rngs.params(), (cfg.seq_len, cfg.d_model)))
    self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
    self.ln_f = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.head = _linear(cfg.d_model, cfg.vocab_size, rngs)

  def __call__(self, tokens: jax.Array, **kwargs) -> jax.Array:
    return self.forward(tokens, **kwargs).logits

  def forward(self, tokens: jax.Array | None = None, *, embeddings: jax.Array | None = None,
              positions: jax.Array | None = None,
              mask: jax.Array | None = None, bias: jax.Array | None = None,
              causal: bool = True, head_scale: jax.Array | None = None,
              context: jax.Array | None = None, context_mask: jax.Array | None = None,
              cache: KVCache | None = None, return_hidden: bool = False,
              return_attention: bool = False, attend: Callable | None = None,
              attend_state=None) -> DecoderOutput:
    """Runs the decoder on ``tokens (..., T)`` (or ``embeddings (..., T, d_model)``); see
    the module docstring for each input."""
    cfg = self.cfg
    if (tokens is None) == (embeddings is None):
      raise ValueError("give exactly one of tokens and embeddings, got "
                       f"tokens={'None' if tokens is None else 'an array'}, "
                       f"embeddings={'None' if embeddings is None else 'an array'}")
    if embeddings is not None and (jnp.ndim(embeddings) < 2
                                   or jnp.shape(embeddings)[-1] != cfg.d_model):
      raise ValueError(f"embeddings must have shape (..., T, d_model={cfg.d_model}), got "
                       f"{jnp.shape(embeddings)}")
    if attend is not None and (cache is None or return_attention):
      raise ValueError("attend needs a cache and cannot return attention weights, got "
                       f"cache={'None' if cache is None else 'a KVCache'}, "
                       f"return_attention={return_attention}")
    if attend is None and attend_state is not None:
      raise ValueError("attend_state was given without an attend hook")
    if (context is not None) != cfg.cross_attention:
      raise ValueError("context must be given exactly when cfg.cross_attention is True, got "
                       f"context={'None' if context is None else 'an array'}")
    if embeddings is None:
      lead, t = tokens.shape[:-1], tokens.shape[-1]
      x = self.embed(tokens.reshape(-1, t))
    else:
      lead, t = embeddings.shape[:-2], embeddings.shape[-2]
      x = jnp.asarray(embeddings).reshape(-1, t, cfg.d_model)
    b = x.shape[0]
    start = jnp.zeros((), jnp.int32) if cache is None else cache.length
    slots = start + jnp.arange(t)  # index of each query in the sequence
    s = t if cache is None else cache.max_len
    if cache is not None and cache.k.shape[1] != b:
      raise ValueError(f"cache holds batch {cache.k.shape[1]}, tokens batch {b}")
    if cfg.positions == "learned":
      if cache is None and t > cfg.seq_len:
        raise ValueError(f"tokens has length {t}, more than seq_len={cfg.seq_len}")
      x = x + (self.pos[...][:t] if cache is None else jnp.take(self.pos[...], slots, axis=0))
    n_axes = cfg.rope_num_axes
    if positions is None:
      positions = slots if n_axes is None else jnp.repeat(slots[:, None], n_axes, axis=1)
    elif jnp.ndim(positions) > (1 if n_axes is None else 2):  # batched positions
      positions = jnp.asarray(positions).reshape(-1, *jnp.shape(positions)[len(lead):])
    key_slots = jnp.arange(s)
    full = None
    if causal:
      full = key_slots[None, :] <= slots[:, None]  # (T, S); also hides unfilled cache slots
    elif cache is not None:
      full = jnp.broadcast_to(key_slots < start + t, (t, s))
    if mask is not None:
      m = _flat(jnp.asarray(mask, bool), lead)
      full = m if full is None else jnp.logical_and(full, m)
    ctx = BlockContext(positions, full, None if bias is None else _flat(jnp.asarray(bias), lead),
               None if context is None else context.reshape(b, *context.shape[len(lead):]),
               None if context_mask is None else _flat(jnp.asarray(context_mask, bool), lead),
               return_attention)
    hidden, weights, probs, aux, new_k, new_v, cross = [x], [], [], [], [], [], []
    for layer, block in enumerate(self.blocks):
      kv = None if cache is None else (cache.k[layer], cache.v[layer], start)
      scale = None if head_scale is None else head_scale[layer]
      if attend is not None:
        state = (None if attend_state is None
                 else jax.tree.map(lambda s, i=layer: s[i], attend_state))
        ctx = ctx._replace(attend=attend, attend_state=state)
      x, new_kv, w, p, a, cw = block(x, ctx, kv, scale)
      cross.append(cw)
      hidden.append(x)
      weights.append(w)
      probs.append(p)
      aux.append(a)
      if new_kv is not None:
        new_k.append(new_kv[0])
        new_v.append(new_kv[1])
    logits = self.head(self.ln_f(x))
    unflat = lambda y, axis=0: y.reshape(*y.shape[:axis], *lead, *y.shape[axis + 1:])
    new_cache = None
    if cache is not None:
      new_cache = KVCache(jnp.stack(new_k), jnp.stack(new_v), start + t)
    moe = cfg.num_experts > 0
    return DecoderOutput(
        logits=unflat(logits),
        cache=new_cache,
        hidden=unflat(jnp.stack(hidden), 1) if return_hidden else None,
        attention=unflat(jnp.stack(weights), 1) if return_attention and attend is None
        else None,
        router_probs=unflat(jnp.stack(probs), 1) if moe else None,
        aux_loss=sum(aux) if moe else None,
        attend_state=None if attend is None else jax.tree.map(lambda *s: jnp.stack(s), *weights),
        cross_attention=unflat(jnp.stack(cross), 1) if return_attention and cfg.cross_attention
        else None)


def _flat(x: jax.Array, lead: tuple[int, ...]) -> jax.Array:
  """A mask / bias given over the caller's leading dims ``(*lead, H?, T, S)`` reshaped to
  one batch dim; an array without the leading dims is left to broadcast."""
  if x.ndim == len(lead) + 3 and x.shape[:len(lead)] == lead and lead:
    return x.reshape(-1, *x.shape[len(lead):])
  if x.ndim == len(lead) + 2 and x.shape[:len(lead)] == lead and lead:
    return x.reshape(-1, 1, *x.shape[len(lead):])  # no head axis
  return x


def create(cfg: TransformerConfig, key: jax.Array) -> Net:
  """A freshly initialized :class:`Transformer` as a :class:`Net` (graph + param pytree)."""
  return Net.create(Transformer(cfg, rngs=nnx.Rngs(params=key)))


def graph(cfg: TransformerConfig) -> Net:
  """The :class:`Transformer`'s graph as a :class:`Net` with ``params=None``, built from an
  abstract module (``nnx.eval_shape``: no parameter is initialized); give it parameters
  with ``net.replace(params=...)``."""
  return Net.create(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0)))
                    ).replace(params=None)


def fit_next_token(key: jax.Array, cfg: TransformerConfig, tokens: jax.Array,
                   loss_mask: jax.Array, optimizer: optax.GradientTransformation, *,
                   num_steps: int, batch_size: int):
  """A fresh model trained on :func:`next_token_loss` over uniformly sampled minibatches.

  ``key`` splits into the initialization's and the training's keys; the loop is
  :func:`jaxlab.training.fit` with :func:`jaxlab.training.fit.minibatch_sampler` over
  the rows of ``(tokens, loss_mask)``. Jit the caller (``num_steps`` and
  ``batch_size`` are static).

  Returns:
    ``(params, losses)``: the trained parameters and the per-step losses.
  """
  k_init, k_fit = jax.random.split(key)
  net = create(cfg, k_init)
  loss = lambda p, batch, _: next_token_loss(net.replace(params=p), *batch)  # noqa: E731
  res = fit(loss, optimizer, net.params, k_fit, num_steps=num_steps,
            sample=minibatch_sampler((tokens, loss_mask), batch_size))
  return res.state.params, res.losses


def make_train_step(net: Net, optimizer: optax.GradientTransformation,
                    loss_fn: Callable[[Net, jax.Array], jax.Array] | None = None):
  """``step(params, opt_state, tokens) -> (params, opt_state, loss)``: one optimizer step
  on ``loss_fn(net with params, tokens)`` (default :func:`next_token_loss`). Pure: jit it;
  on a mesh, place its inputs with :mod:`jaxlab.training.sharding` and jit it unchanged."""
  loss_fn = next_token_loss if loss_fn is None else loss_fn

  def step(params, opt_state, tokens):
    loss, grads = jax.value_and_grad(lambda p: loss_fn(net.replace(params=p), tokens))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  return step


def next_token_loss(model: Callable[[jax.Array], jax.Array], tokens: jax.Array,
                    mask: jax.Array | None = None) -> jax.Array:
  r"""Mean next-token cross-entropy ``-mean log p(x_{i+1} | x_{<=i})`` over the batch.

  Args:
    model: maps int tokens ``(..., T)`` to logits ``(..., T, V)``: a :class:`Transformer`,
      or a :class:`Net` holding one (``net.replace(params=p)`` for other parameters).
    tokens: int array ``(..., T + 1)``; positions ``0..T-1`` are inputs, ``1..T`` targets.
    mask: optional ``(..., T)`` weights of the targets (e.g. an answer's positions,
      :class:`jaxlab.data.lm_tasks.SeqData`'s ``loss_mask``): the weighted mean.

  Returns:
    The scalar mean loss in nats.
  """
  logits = model(tokens[..., :-1])
  ce = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[..., 1:])
  if mask is None:
    return ce.mean()
  return jnp.sum(ce * mask) / jnp.maximum(jnp.sum(mask), 1e-9)
