"""The tiny transformer LM: shapes, causality, loss at init, and that AdamW learns."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from scipy.special import log_softmax

from jaxlab.models import Transformer, TransformerConfig, next_token_loss, transformer

CFG = TransformerConfig(vocab_size=32, d_model=16, num_heads=2, num_layers=2, seq_len=12)
NET = transformer.create(CFG, jax.random.key(0))
APPLY = jax.jit(lambda params, x: NET(x, params=params))  # one compile per input shape
LOSS = jax.jit(lambda params, x: next_token_loss(NET.replace(params=params), x))


def _tokens(key, shape):
  return jax.random.randint(key, shape, 0, CFG.vocab_size, jnp.int32)


def test_shapes():
  assert APPLY(NET.params, _tokens(jax.random.key(1), (2, 12))).shape == (2, 12, CFG.vocab_size)
  assert APPLY(NET.params, _tokens(jax.random.key(1), (5,))).shape == (5, CFG.vocab_size)


def test_causal():
  x = _tokens(jax.random.key(2), (2, 12))
  y = x.at[:, 7].set((x[:, 7] + 1) % CFG.vocab_size)  # change position 7 only
  lx, ly = APPLY(NET.params, x), APPLY(NET.params, y)
  np.testing.assert_allclose(lx[:, :7], ly[:, :7], rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(lx[:, 7:] - ly[:, 7:])).max() > 1e-4  # later positions do see it


def test_loss_at_init_is_log_vocab():
  loss = LOSS(NET.params, _tokens(jax.random.key(3), (8, 13)))
  assert abs(float(loss) - np.log(CFG.vocab_size)) < 0.02


def test_adamw_reduces_loss_on_a_fixed_batch():
  tokens = _tokens(jax.random.key(4), (8, 13))
  opt = optax.adamw(1e-2, weight_decay=0.1)

  @jax.jit
  def train(params):
    def step(carry, _):
      params, state = carry
      loss, grads = jax.value_and_grad(LOSS)(params, tokens)
      updates, state = opt.update(grads, state, params)
      return (optax.apply_updates(params, updates), state), loss
    return jax.lax.scan(step, (params, opt.init(params)), length=30)[1]

  losses = np.asarray(train(NET.params))
  assert losses[-1] < losses[0] - 1.0, losses


def test_module_matches_net_and_loss_is_cross_entropy():
  model = Transformer(CFG, rngs=nnx.Rngs(params=jax.random.key(0)))  # same key as NET
  x = _tokens(jax.random.key(5), (2, 13))
  logits = APPLY(NET.params, x[:, :-1])
  np.testing.assert_allclose(nnx.jit(lambda m, t: m(t))(model, x[:, :-1]), logits, rtol=1e-5,
                             atol=1e-6)
  logp = log_softmax(np.asarray(logits, np.float64), axis=-1)
  manual = -np.take_along_axis(logp, np.asarray(x[:, 1:])[..., None], -1).mean()
  assert float(LOSS(NET.params, x)) == pytest.approx(manual, rel=1e-5)


def test_bad_config_and_input():
  with pytest.raises(ValueError, match="num_heads must divide d_model"):
    TransformerConfig(vocab_size=8, d_model=10, num_heads=3, num_layers=1, seq_len=4)
  with pytest.raises(ValueError, match="seq_len"):
    TransformerConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, seq_len=0)
  with pytest.raises(ValueError, match="vocab_size"):
    TransformerConfig(vocab_size=2.5, d_model=8, num_heads=2, num_layers=1, seq_len=4)
  with pytest.raises(ValueError, match="seq_len"):
    APPLY(NET.params, _tokens(jax.random.key(0), (1, 13)))
