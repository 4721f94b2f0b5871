"""bench_lm: the anchor is the same model, the recomputing decoder the same decoding."""

import jax
import numpy as np
from flax import nnx

from experiments import bench_lm
from jaxlab.models import decoding
from jaxlab.models import transformer as tfm
from jaxlab.nn import Net

CFG = tfm.TransformerConfig(vocab_size=16, d_model=16, num_heads=2, num_layers=2, seq_len=12)


def test_plain_transformer_is_our_model_without_hooks():
  ours = tfm.create(CFG, jax.random.key(0))
  plain = Net.create(bench_lm.PlainTransformer(CFG, rngs=nnx.Rngs(params=jax.random.key(0))))
  # copy our weights into the plain layout: same function, so the same logits
  model, anchor = ours.module(), plain.module()
  for i, block in enumerate(model.blocks):
    for mine, theirs in (("ln1", block.ln1), ("qkv", block.attn.qkv), ("out", block.attn.out),
                         ("ln2", block.ln2), ("fc", block.fc), ("proj", block.proj)):
      nnx.update(getattr(anchor, mine)[i], nnx.state(theirs))
  for name in ("embed", "ln_f", "head"):
    nnx.update(getattr(anchor, name), nnx.state(getattr(model, name)))
  x = jax.random.randint(jax.random.key(1), (2, 12), 0, 16)
  np.testing.assert_allclose(jax.jit(lambda m: m(x))(anchor), jax.jit(lambda m: m(x))(model),
                             rtol=1e-5, atol=1e-5)
  # and the recomputing decoder is greedy decoding
  prompt = x[:, :8]
  np.testing.assert_array_equal(
      jax.jit(bench_lm._recompute, static_argnums=2)(ours, prompt, 4),
      decoding.generate(ours, prompt, jax.random.key(0), 4, temperature=0.0).tokens)


def test_ratios_on_a_synthetic_bench():
  rows = bench_lm.ratios({
      "train": {"shape": "s", "ratio_median": 1.05, "ours_tokens_per_s": 100.0,
                "plain_tokens_per_s": 105.0},
      "decode": {"context": 512, "ratio_median": 0.05}})
  assert [r.ratio for r in rows] == [1.05, 0.05]
  assert "20.0x faster" in rows[1].note
