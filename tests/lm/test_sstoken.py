"""ssToken's scores and selection on hand-built arrays, and its loss on a tiny model."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.lm import sstoken as ss
from jaxlab.models import transformer as tfm

MASK = jnp.array([[0, 1, 1, 1, 1], [0, 0, 1, 1, 0]], jnp.float32)


def test_minmax_normalizes_each_sample_over_its_response():
  x = jnp.array([[9.0, 1.0, 3.0, 5.0, 2.0], [-7.0, 7.0, -1.0, 1.0, 9.0]])
  got = jax.jit(ss.minmax_normalize)(x, MASK)
  np.testing.assert_allclose(got[0], [0.0, 0.0, 0.5, 1.0, 0.25], atol=1e-6)
  np.testing.assert_allclose(got[1], [0.0, 0.0, 0.0, 1.0, 0.0], atol=1e-6)
  flat = ss.minmax_normalize(jnp.ones((1, 5)), MASK[:1])  # max = min: 0 / 1e-8
  np.testing.assert_allclose(flat, 0.0)


def test_select_top_keeps_ceil_rho_of_each_response():
  scores = jnp.array([[5.0, 0.1, 0.9, 0.5, 0.7], [9.0, 9.0, 0.2, 0.3, 9.0]])
  keep = jax.jit(ss.select_top)(scores, MASK, 0.6)  # ceil(2.4) = 3 and ceil(1.2) = 2
  np.testing.assert_array_equal(keep, [[0, 0, 1, 1, 1], [0, 0, 1, 1, 0]])
  keep = ss.select_top(scores, MASK, 0.5)  # ceil(2) = 2, ceil(1) = 1
  np.testing.assert_array_equal(keep, [[0, 0, 1, 0, 1], [0, 0, 0, 1, 0]])
  np.testing.assert_array_equal(ss.select_top(scores, MASK, 1.0), MASK)
  # 0.6 * 5 = 3 exactly in float32 rounding terms: keep 3, not 4
  five = jnp.ones((1, 5))
  assert float(ss.select_top(jnp.arange(5.0)[None], five, 0.6).sum()) == 3.0


def test_prompt_attention_sums_head_mean_over_prompt_columns():
  a = jnp.zeros((1, 2, 2, 4))  # (B, H, rows, S), prompt = first 2 columns
  a = a.at[0, 0, 0].set(jnp.array([0.5, 0.5, 0.0, 0.0]))  # head 0: all on the prompt
  a = a.at[0, 1, 0].set(jnp.array([0.0, 0.2, 0.8, 0.0]))  # head 1: 0.2 on the prompt
  a = a.at[0, :, 1].set(jnp.array([0.1, 0.0, 0.3, 0.6]))  # both heads: 0.1
  np.testing.assert_allclose(jax.jit(ss.prompt_attention, static_argnums=1)(a, 2),
                             [[0.6, 0.1]], atol=1e-6)
  np.testing.assert_allclose(ss.prompt_attention(a, jnp.array([3])), [[1.0, 0.4]], atol=1e-6)


def test_gamma_one_and_zero_reduce_to_the_single_signals():
  rel = jnp.array([[0.0, 2.0, 0.0, 4.0, 1.0], [0.0, 0.0, 3.0, 1.0, 0.0]])
  attn = jnp.array([[0.9, 0.1, 0.8, 0.3, 0.2], [0.0, 0.0, 0.4, 0.6, 0.0]])
  np.testing.assert_allclose(ss.token_scores(rel, attn, MASK, 1.0),
                             ss.minmax_normalize(rel, MASK), atol=1e-6)
  np.testing.assert_allclose(ss.token_scores(rel, attn, MASK, 0.0), attn * MASK, atol=1e-6)
  mixed = ss.token_scores(rel, attn, MASK, 0.5)
  np.testing.assert_allclose(mixed[0, 1:], [0.5 * 0.5 + 0.05, 0.4, 0.5 + 0.15, 0.125 + 0.1],
                             atol=1e-6)


def test_warm_start_is_attention_only_first():
  got = jax.jit(ss.warm_gamma)(jnp.arange(5), 0.5, 2)
  np.testing.assert_allclose(got, [0.0, 0.0, 0.5, 0.5, 0.5])


@pytest.fixture(scope="module")
def tiny():
  cfg = tfm.TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, seq_len=8)
  net = tfm.create(cfg, jax.random.key(0))
  tokens = jax.random.randint(jax.random.key(1), (3, 8), 0, 11)
  mask = jnp.broadcast_to((jnp.arange(7) >= 2).astype(jnp.float32), (3, 7))
  return net, tokens, mask


def test_loss_is_masked_ce_on_the_kept_tokens(tiny):
  net, tokens, mask = tiny
  his = jax.random.uniform(jax.random.key(2), (3, 7)) * 3

  @jax.jit
  def run(p):
    loss, _ = ss.sstoken_loss(net, p, tokens, mask, his, 3, rho=0.6, gamma=0.5)
    full_loss, _ = ss.sstoken_loss(net, p, tokens, mask, his, 3, rho=1.0)
    return loss, full_loss, ss.token_losses(net, tokens, params=p, layer=-1), \
        net.module(p).forward(tokens, return_attention=True).attention

  loss, full_loss, out, maps = run(net.params)
  # the same selection by hand: scores from the last layer's rows 1..T-1
  attn = maps[-1].mean(1)[:, 1:, :3].sum(-1)
  np.testing.assert_allclose(ss.prompt_attention(out.attention, 3), attn, atol=1e-6)
  keep = ss.select_top(ss.token_scores(his - out.ce, attn, mask, 0.5), mask, 0.6)
  assert keep.sum(1).tolist() == [3.0, 3.0, 3.0]  # ceil(0.6 * 5)
  assert float(loss) == pytest.approx(float(jnp.sum(out.ce * keep) / 9.0), rel=1e-5)
  assert float(loss) != pytest.approx(float(jnp.sum(out.ce * mask) / 15.0), rel=1e-3)
  # rho = 1 is full SFT on the response: the toolkit's masked next-token loss
  ref = jax.jit(lambda p: tfm.next_token_loss(net.replace(params=p), tokens, mask))(net.params)
  assert float(full_loss) == pytest.approx(float(ref), rel=1e-5)


def test_train_step_history_ema_and_fixed_base(tiny):
  net, tokens, mask = tiny
  step = jax.jit(ss.make_train_step(net, optax.sgd(0.1), 3))
  state = ss.SSTokenState(net.params, optax.sgd(0.1).init(net.params), net.params)
  batch = (tokens, mask, jnp.zeros((3, 7)))
  arm = lambda a: dict(rho=0.6, gamma=0.5, use_random=False, alpha=a)  # noqa: E731
  fixed, m = step(state, batch, arm(1.0))
  ema, _ = step(state, batch, arm(0.9))
  leaf = lambda t: jax.tree.leaves(t)[0]  # noqa: E731
  np.testing.assert_array_equal(leaf(fixed.history), leaf(net.params))
  np.testing.assert_allclose(leaf(ema.history),
                             0.9 * leaf(net.params) + 0.1 * leaf(ema.params), atol=1e-6)
  assert float(m["kept"]) == pytest.approx(0.6) and np.isfinite(float(m["loss"]))
  assert not np.allclose(leaf(fixed.params), leaf(net.params))


def test_config_rejects_bad_values():
  with pytest.raises(ValueError, match="rho"):
    ss.SSTokenConfig(rho=0.0)
  with pytest.raises(ValueError, match="gamma"):
    ss.SSTokenConfig(gamma=1.5)
  with pytest.raises(ValueError, match="layer"):
    ss.SSTokenConfig(layer=1.0)
  with pytest.raises(ValueError, match="prompt_len"):
    ss.make_train_step(None, optax.sgd(0.1), 0)
