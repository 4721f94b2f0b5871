"""LoRA adapters: zero-init B is the base network, merged equals unmerged, fused blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxlab.models import transformer as tfm
from jaxlab.nn import Net, lora

CFG = tfm.TransformerConfig(vocab_size=16, d_model=16, num_heads=2, num_layers=2, seq_len=8,
                            cross_attention=True, context_dim=8)


def _randomise_b(w, key):
  return {p: v._replace(b=jax.random.normal(jax.random.fold_in(key, i), v.b.shape))
          for i, (p, v) in enumerate(sorted(w.items()))}


def test_zero_init_b_gives_the_base_output_and_grads_reach_b():
  net = tfm.create(CFG, jax.random.key(0))
  cfg = lora.LoraConfig(4, 8.0, lora.attention_targets(1, "cross"))
  w = lora.init(jax.random.key(1), net.params, cfg)
  tokens = jnp.arange(6)[None] % 16
  ctx = jax.random.normal(jax.random.key(2), (1, 3, 8))
  run = jax.jit(lambda p: net(tokens, context=ctx, params=p))
  np.testing.assert_array_equal(run(lora.merge(net.params, w, cfg)), run(net.params))
  g = jax.grad(lambda w: jnp.sum(run(lora.merge(net.params, w, cfg)) ** 2))(w)
  for path in ("blocks/1/cross/q/kernel", "blocks/1/cross/kv/kernel"):
    assert float(jnp.abs(g[path].b).max()) > 0  # B learns first
    np.testing.assert_array_equal(g[path].a, 0.0)  # dL/dA = x^T g B^T = 0 while B = 0
  # switched off by scale 0 once B is non-zero
  w2 = _randomise_b(w, jax.random.key(3))
  np.testing.assert_array_equal(run(lora.merge(net.params, w2, cfg, scale=0.0)),
                                run(net.params))
  assert float(jnp.abs(run(lora.merge(net.params, w2, cfg)) - run(net.params)).max()) > 1e-3


def test_merged_equals_unmerged_on_a_linear_with_fused_blocks():
  lin = Net.create(nnx.Linear(5, 6, rngs=nnx.Rngs(0)))
  cfg = lora.LoraConfig(2, 3.0, (("kernel", 3),))
  w = _randomise_b(lora.init(jax.random.key(1), lin.params, cfg), jax.random.key(2))
  x = jax.random.normal(jax.random.key(3), (4, 5))
  merged = jax.jit(lambda w: lin(x, params=lora.merge(lin.params, w, cfg, 0.5)))(w)
  kernel, bias = lin.params["kernel"][...], lin.params["bias"][...]
  unmerged = lora.apply_linear(x, kernel, bias, w["kernel"], cfg.scaling, 0.5)
  np.testing.assert_allclose(merged, unmerged, rtol=1e-5, atol=1e-6)
  # by hand: block j of the columns is x A_j B_j, scaled by 0.5 * alpha / r
  a, b = np.asarray(w["kernel"].a), np.asarray(w["kernel"].b)
  ref = np.asarray(x) @ np.asarray(kernel) + np.asarray(bias) + 0.5 * 1.5 * np.concatenate(
      [np.asarray(x) @ a[j] @ b[j] for j in range(3)], -1)
  np.testing.assert_allclose(unmerged, ref, rtol=1e-5, atol=1e-5)
  assert lora.count(w) == 3 * (5 * 2 + 2 * 2)


def test_bad_input():
  net = tfm.create(CFG, jax.random.key(0))
  with pytest.raises(ValueError, match="rank"):
    lora.LoraConfig(0, 1.0, (("kernel", 1),))
  with pytest.raises(ValueError, match="targets"):
    lora.LoraConfig(2, 1.0, ())
  with pytest.raises(ValueError, match="not a parameter path"):
    lora.init(jax.random.key(0), net.params, lora.LoraConfig(2, 1.0, (("blocks/9/q", 1),)))
  with pytest.raises(ValueError, match="split into 5 blocks"):
    lora.init(jax.random.key(0), net.params,
              lora.LoraConfig(2, 1.0, (("blocks/0/cross/kv/kernel", 5),)))
  with pytest.raises(ValueError, match="kind"):
    lora.attention_targets(0, "mlp")
