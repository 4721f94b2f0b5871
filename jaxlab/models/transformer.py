r"""A tiny causal decoder-only transformer language model in flax nnx.

Token embedding plus learned positions, ``num_layers`` pre-LayerNorm blocks,
a final LayerNorm and an untied output head (GPT-2's layout):

.. math::
  h_0 &= E[x] + P \\
  h_{l+1}' &= h_l + \mathrm{Attn}_l(\mathrm{LN}(h_l)) \quad\text{(causal, multi-head)} \\
  h_{l+1} &= h_{l+1}' + \mathrm{MLP}_l(\mathrm{LN}(h_{l+1}')) \\
  \mathrm{logits} &= W_{\mathrm{out}}\,\mathrm{LN}(h_L)

Weights are initialized ``N(0, 0.02^2)`` (GPT-2), so the logits start near zero
and the next-token loss at initialization is close to ``log(vocab_size)``.

Training loops handle the parameters as a plain pytree through
:class:`jaxlab.rl.networks.Net` (static graph + params), e.g. under
``lax.scan`` over steps and ``jax.vmap`` over seeds or hyperparameters.

Example:
  >>> cfg = TransformerConfig(vocab_size=64, d_model=32, num_heads=2, num_layers=2, seq_len=32)
  >>> net = Net.create(Transformer(cfg, rngs=nnx.Rngs(0)))
  >>> tokens = jnp.zeros((4, 33), jnp.int32)
  >>> loss = next_token_loss(net, tokens)            # with net.params
  >>> grads = jax.grad(lambda p: next_token_loss(net.replace(params=p), tokens))(net.params)

References:
  Vaswani et al., "Attention Is All You Need", arXiv:1706.03762, 2017.
  Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from jaxlab.nn import Net

INIT_STD = 0.02  # GPT-2's initializer scale


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Static shape of the model (hashable, so it can be a jit static argument)."""

  vocab_size: int  # number of token ids
  d_model: int  # residual width
  num_heads: int  # attention heads; must divide d_model
  num_layers: int  # transformer blocks
  seq_len: int  # maximum context (number of learned positions)
  mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model

  def __post_init__(self):
    for name in ("vocab_size", "d_model", "num_heads", "num_layers", "seq_len", "mlp_ratio"):
      value = getattr(self, name)
      if not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    if self.d_model % self.num_heads:
      raise ValueError(f"num_heads must divide d_model, got d_model={self.d_model}, "
                       f"num_heads={self.num_heads}")


def _linear(a: int, b: int, rngs: nnx.Rngs) -> nnx.Linear:
  return nnx.Linear(a, b, kernel_init=nnx.initializers.normal(INIT_STD), rngs=rngs)


class CausalSelfAttention(nnx.Module):
  """Multi-head self-attention in which position ``i`` sees positions ``<= i``."""

  def __init__(self, d_model: int, num_heads: int, *, rngs: nnx.Rngs):
    self.num_heads = num_heads
    self.qkv = _linear(d_model, 3 * d_model, rngs)
    self.out = _linear(d_model, d_model, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    *lead, t, d = x.shape
    q, k, v = jnp.split(self.qkv(x).reshape(-1, t, 3, self.num_heads, d // self.num_heads),
                        3, axis=2)
    y = jax.nn.dot_product_attention(q[:, :, 0], k[:, :, 0], v[:, :, 0], is_causal=True)
    return self.out(y.reshape(*lead, t, d))


class Block(nnx.Module):
  """Pre-LN block: ``x + attn(LN(x))`` then ``x + MLP(LN(x))``."""

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.ln1 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.attn = CausalSelfAttention(cfg.d_model, cfg.num_heads, rngs=rngs)
    self.ln2 = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.fc = _linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model, rngs)
    self.proj = _linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model, rngs)

  def __call__(self, x: jax.Array) -> jax.Array:
    x = x + self.attn(self.ln1(x))
    return x + self.proj(jax.nn.gelu(self.fc(self.ln2(x))))


class Transformer(nnx.Module):
  """Causal decoder LM: ``int tokens (..., T) -> logits (..., T, vocab_size)``, ``T <= seq_len``.

  Args:
    cfg: the model's :class:`TransformerConfig`.
    rngs: ``nnx.Rngs`` for the initializers.
  """

  def __init__(self, cfg: TransformerConfig, *, rngs: nnx.Rngs):
    self.cfg = cfg
    init = nnx.initializers.normal(INIT_STD)
    self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=init, rngs=rngs)
    self.pos = nnx.Param(init(rngs.params(), (cfg.seq_len, cfg.d_model)))
    self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
    self.ln_f = nnx.LayerNorm(cfg.d_model, rngs=rngs)
    self.head = _linear(cfg.d_model, cfg.vocab_size, rngs)

  def __call__(self, tokens: jax.Array) -> jax.Array:
    t = tokens.shape[-1]
    if t > self.cfg.seq_len:
      raise ValueError(f"tokens has length {t}, more than seq_len={self.cfg.seq_len}")
    x = self.embed(tokens) + self.pos[...][:t]
    for block in self.blocks:
      x = block(x)
    return self.head(self.ln_f(x))


def create(cfg: TransformerConfig, key: jax.Array) -> Net:
  """A freshly initialized :class:`Transformer` as a :class:`Net` (graph + param pytree)."""
  return Net.create(Transformer(cfg, rngs=nnx.Rngs(params=key)))


def next_token_loss(model: Callable[[jax.Array], jax.Array], tokens: jax.Array) -> jax.Array:
  r"""Mean next-token cross-entropy ``-mean log p(x_{i+1} | x_{<=i})`` over the batch.

  Args:
    model: maps int tokens ``(..., T)`` to logits ``(..., T, V)``: a :class:`Transformer`,
      or a :class:`Net` holding one (``net.replace(params=p)`` for other parameters).
    tokens: int array ``(..., T + 1)``; positions ``0..T-1`` are inputs, ``1..T`` targets.

  Returns:
    The scalar mean loss in nats.
  """
  logits = model(tokens[..., :-1])
  return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[..., 1:]).mean()
