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


def test_shapes_and_unbatched_input():
  x = _tokens(jax.random.key(1), (2, 12))
  logits = APPLY(NET.params, x)
  assert logits.shape == (2, 12, CFG.vocab_size)
  np.testing.assert_allclose(APPLY(NET.params, x[1]), logits[1], rtol=1e-5, atol=1e-6)


def test_causal():
  x = _tokens(jax.random.key(2), (2, 12))
  y = x.at[:, 7].set((x[:, 7] + 1) % CFG.vocab_size)  # change position 7 only
  lx, ly = APPLY(NET.params, x), APPLY(NET.params, y)
  np.testing.assert_allclose(lx[:, :7], ly[:, :7], rtol=1e-6, atol=1e-6)
  assert np.abs(np.asarray(lx[:, 7:] - ly[:, 7:])).max() > 1e-4  # later positions do see it


def test_loss_is_cross_entropy_and_log_vocab_at_init():
  x = _tokens(jax.random.key(3), (2, 13))
  loss = float(LOSS(NET.params, x))
  assert abs(loss - np.log(CFG.vocab_size)) < 0.1  # a default-scale head would be ~0.5 off
  logp = log_softmax(np.asarray(APPLY(NET.params, x[:, :-1]), np.float64), axis=-1)
  manual = -np.take_along_axis(logp, np.asarray(x[:, 1:])[..., None], -1).mean()
  assert loss == pytest.approx(manual, rel=1e-5)


def test_adamw_reduces_loss_on_a_fixed_batch():
  cfg = TransformerConfig(vocab_size=32, d_model=16, num_heads=2, num_layers=1, seq_len=12)
  net = transformer.create(cfg, jax.random.key(0))  # one layer: half the compile time
  tokens = _tokens(jax.random.key(4), (8, 13))
  opt = optax.adamw(1e-2, weight_decay=0.1)
  loss_fn = lambda params: next_token_loss(net.replace(params=params), tokens)

  @jax.jit
  def train(params):
    def step(carry, _):
      params, state = carry
      loss, grads = jax.value_and_grad(loss_fn)(params)
      updates, state = opt.update(grads, state, params)
      return (optax.apply_updates(params, updates), state), loss
    return jax.lax.scan(step, (params, opt.init(params)), length=30)[1]

  losses = np.asarray(train(net.params))
  assert losses[-1] < losses[0] - 1.0, losses


def test_create_holds_the_modules_parameters():
  model = Transformer(CFG, rngs=nnx.Rngs(params=jax.random.key(0)))  # same key as NET
  state = nnx.state(model)
  assert jax.tree.structure(state) == jax.tree.structure(NET.params)
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(NET.params), strict=True):
    np.testing.assert_array_equal(a, b)
  assert sum(x.size for x in jax.tree.leaves(NET.params)) == (
      32 * 16 + 12 * 16 + 2 * (4 * 16 + 16 * 48 + 48 + 16 * 16 + 16 + 16 * 64 + 64 + 64 * 16 + 16)
      + 2 * 16 + 16 * 32 + 32)


def test_bad_config_and_input():
  with pytest.raises(ValueError, match="num_heads must divide d_model"):
    TransformerConfig(vocab_size=8, d_model=10, num_heads=3, num_layers=1, seq_len=4)
  with pytest.raises(ValueError, match="seq_len"):
    TransformerConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, seq_len=0)
  with pytest.raises(ValueError, match="vocab_size"):
    TransformerConfig(vocab_size=2.5, d_model=8, num_heads=2, num_layers=1, seq_len=4)
  with pytest.raises(ValueError, match="seq_len"):
    APPLY(NET.params, _tokens(jax.random.key(0), (1, 13)))
