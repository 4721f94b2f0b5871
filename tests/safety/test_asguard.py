"""ASGuard against references: IG's completeness, activation patching on hand-built cases,
the scaling vectors (ones = identity, folding = hooking) and the metrics on hand-labelled
outputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.models import transformer as tfm
from jaxlab.safety import asguard as ag

CFG = tfm.TransformerConfig(vocab_size=12, d_model=16, num_heads=2, num_layers=2, seq_len=8)


@pytest.fixture(scope="module")
def net():
  return tfm.create(CFG, jax.random.key(0))


def _rows(key, n=3, t=6):
  return jax.random.randint(key, (n, t), 0, CFG.vocab_size)


def test_ig_exact_on_quadratic_and_complete():
  a = jnp.array([1.0, -2.0, 0.5])
  x, b = jnp.array([1.0, 2.0, -3.0]), jnp.array([0.5, 0.0, 1.0])
  f = lambda z: jnp.sum(a * z ** 2) + z[0] * 3.0  # noqa: E731
  ig = ag.integrated_gradients(f, x, b, steps=3)
  # closed form: a_i (x_i^2 - b_i^2) (+ the linear term's 3 (x_0 - b_0))
  np.testing.assert_allclose(ig, a * (x ** 2 - b ** 2) + jnp.array([1.5, 0, 0]), rtol=1e-5)
  np.testing.assert_allclose(ig.sum(), f(x) - f(b), rtol=1e-5)


def test_head_attribution_completeness(net):
  tokens = _rows(jax.random.key(1))
  mask = jnp.zeros((3, 5)).at[:, -2:].set(1.0)
  attr = ag.head_attribution(net, tokens, mask, steps=32)
  f = lambda g: -ag.safe_nll(net, tokens, mask, head_scale=g[..., None])  # noqa: E731
  gap = f(jnp.ones((2, 2))) - f(jnp.zeros((2, 2)))
  assert attr.shape == (2, 2)
  np.testing.assert_allclose(attr.sum(), gap, rtol=1e-3, atol=1e-5)


def test_head_outputs_match_plain_forward_and_patch_all_restores_clean(net):
  clean, corrupt = _rows(jax.random.key(2)), _rows(jax.random.key(3))
  logits, heads = ag.head_outputs(net, clean)
  np.testing.assert_allclose(logits, net(clean), atol=1e-5)
  assert heads.shape == (2, 3, 6, 2, 8)
  # patching every head from the clean run: layer 0's heads fix layer 1's input only through
  # the residual, so the logits differ from clean; patching nothing gives corrupt exactly
  none = ag.head_outputs(net, corrupt, heads, jnp.zeros((2, 2), bool))[0]
  np.testing.assert_allclose(none, net(corrupt), atol=1e-5)
  # hand-built: the corrupt run equals the clean one except the token embedding; with the
  # clean tokens as "corrupt", patching any head changes nothing
  same = ag.patching_effects(net, clean, clean, jnp.ones((3, 5)))
  np.testing.assert_allclose(same, 0.0, atol=1e-5)


def test_patching_a_zero_output_head_equals_zero_ablation(net):
  # patching head (1, 0) with zeros equals scaling it by 0 through head_scale
  tokens = _rows(jax.random.key(4))
  use = jnp.zeros((2, 2), bool).at[1, 0].set(True)
  patched = ag.head_outputs(net, tokens, jnp.zeros((2, 3, 6, 2, 8)), use)[0]
  scale = jnp.ones((2, 2, 1)).at[1, 0].set(0.0)
  np.testing.assert_allclose(patched, net.module().forward(tokens, head_scale=scale).logits,
                             atol=1e-5)


def test_patching_effect_is_the_gap_when_one_head_carries_everything(net):
  # a hand-built case: zero every output projection but head (1, 1)'s, so only that head
  # (and the residual) differs between runs; patching it from clean recovers the clean
  # score exactly, the others do nothing
  params = ag.fold_head_scale(net.params, jnp.zeros((2, 2, 8)).at[1, 1].set(1.0))
  one = net.replace(params=params)
  clean = _rows(jax.random.key(5))
  corrupt = clean.at[:, 2].set((clean[:, 2] + 1) % CFG.vocab_size)
  mask = jnp.zeros((3, 5)).at[:, -1].set(1.0)

  def score(tokens, scored):
    logp = jax.nn.log_softmax(one(tokens)[:, :-1])
    return jnp.mean(jnp.sum(jnp.take_along_axis(logp, scored[:, 1:, None], -1)[..., 0] * mask,
                            -1))

  eff = np.asarray(ag.patching_effects(one, clean, corrupt, mask))
  # only the last position is scored; its residual path sees the corrupt token embedding
  # (position 5 is not the changed token), so patching (1, 1) gives the clean head output
  _, heads = ag.head_outputs(one, clean)
  full = ag.head_outputs(one, corrupt, heads, jnp.zeros((2, 2), bool).at[1, 1].set(True))[0]
  logp = jax.nn.log_softmax(full[:, :-1])
  want = jnp.mean(jnp.sum(jnp.take_along_axis(logp, corrupt[:, 1:, None], -1)[..., 0] * mask,
                          -1)) - score(corrupt, corrupt)
  np.testing.assert_allclose(eff[1, 1], want, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(eff[[0, 0, 1], [0, 1, 0]], 0.0, atol=1e-6)
  np.testing.assert_allclose(score(clean, corrupt), score(corrupt, corrupt) + eff[1, 1],
                             rtol=1e-4, atol=1e-5)


def test_scales_ones_are_identity_and_folding_equals_hooking(net):
  tokens = _rows(jax.random.key(6))
  hs = ag.scales_to_head_scale(jnp.ones((2, 8)), [(0, 1), (1, 0)], 2, 2)
  np.testing.assert_array_equal(hs, 1.0)
  np.testing.assert_allclose(net.module().forward(tokens, head_scale=hs).logits, net(tokens),
                             atol=1e-6)
  np.testing.assert_allclose(net.replace(params=ag.fold_post_scale(net.params,
                                                                   jnp.ones((2, 16))))(tokens),
                             net(tokens), atol=1e-6)
  s = jax.random.uniform(jax.random.key(7), (2, 8), minval=0.2, maxval=2.0)
  hs = ag.scales_to_head_scale(s, [(0, 1), (1, 0)], 2, 2)
  np.testing.assert_allclose(hs[0, 1], s[0])
  np.testing.assert_array_equal(hs[0, 0], 1.0)
  folded = net.replace(params=ag.fold_head_scale(net.params, hs))
  np.testing.assert_allclose(folded(tokens), net.module().forward(tokens, head_scale=hs).logits,
                             atol=1e-5)


def test_post_scale_scales_attention_block_output_channels(net):
  # post-projection: zero scale on every channel removes attention from the residual, which
  # is the model with W_O = 0 and its bias = 0
  tokens = _rows(jax.random.key(8))
  zero = net.replace(params=ag.fold_post_scale(net.params, jnp.zeros((2, 2, 8))))
  killed = net.replace(params=ag._map_out(net.params, lambda l, n, x: jnp.zeros_like(x)))
  np.testing.assert_allclose(zero(tokens), killed(tokens), atol=1e-6)


def test_vulnerable_heads():
  flip = np.array([[0.9, 0.1], [0.5, 0.7]])
  always = np.array([[0.0, 0.2], [0.9, 0.1]])
  assert ag.vulnerable_heads(flip, None, 3) == [(0, 0), (1, 1), (1, 0)]
  assert ag.vulnerable_heads(flip, always, 3) == [(0, 0)]  # (1,1), (1,0) in both top-3s
  assert ag.vulnerable_heads(flip, always, 2) == [(0, 0), (1, 1)]
  assert ag.vulnerable_heads(flip, np.full((2, 2), np.nan), 2) == [(0, 0), (1, 1)]
  with pytest.raises(ValueError, match="k must"):
    ag.vulnerable_heads(flip, None, 5)


def test_metrics_on_hand_labelled_outputs():
  ref, answers = ["sorry", "cannot"], ["a1", "a2"]
  labelled = [(["sorry", "cannot"], "refusal"), (["a1"], "comply"), (["sorry", "a1"], "other"),
              ([], "other"), (["a2", "sorry"], "comply")]
  kinds = [ag.classify(w, ref, answers) for w, _ in labelled]
  assert kinds == [k for _, k in labelled]
  assert ag.rates(kinds) == {"refusal": 0.2, "comply": 0.4, "other": 0.4}
  with pytest.raises(ValueError, match="kinds"):
    ag.rates(["maybe"])


def test_bad_input_raises(net):
  with pytest.raises(ValueError, match="steps"):
    ag.integrated_gradients(jnp.sum, jnp.ones(2), jnp.zeros(2), steps=0)
  with pytest.raises(ValueError, match="tokens"):
    ag.head_attribution(net, jnp.ones((3,), jnp.int32), jnp.ones((3, 5)))
  with pytest.raises(ValueError, match="target_mask"):
    ag.head_attribution(net, jnp.ones((3, 6), jnp.int32), jnp.ones((3, 6)))
  with pytest.raises(ValueError, match="scales"):
    ag.scales_to_head_scale(jnp.ones((3, 8)), [(0, 0)], 2, 2)
  with pytest.raises(ValueError, match="heads"):
    ag.scales_to_head_scale(jnp.ones((1, 8)), [(2, 0)], 2, 2)


def test_eap_ig_equals_directional_derivatives_along_the_path(net):
  # reference by forward mode: (z_h - z'_h) . grad_z_h f = d/d eps f(z_h + eps (z_h - z'_h)),
  # averaged over the same midpoint interpolations of the input embeddings
  clean = _rows(jax.random.key(9), n=2)
  corrupt = clean.at[:, 1].set((clean[:, 1] + 3) % CFG.vocab_size)
  mask = jnp.zeros((2, 5)).at[:, -2:].set(1.0)
  steps = 4
  got = np.asarray(ag.eap_ig_heads(net, clean, corrupt, mask, steps))
  module = net.module()
  e, e0 = module.embed(clean[:, :-1]), module.embed(corrupt[:, :-1])
  _, z = ag.head_outputs(net, clean[:, :-1])
  _, z0 = ag.head_outputs(net, corrupt[:, :-1])

  def f(delta, a):
    logits = ag.head_outputs(net, None, delta=delta, embeddings=e0 + a * (e - e0))[0]
    logp = jnp.take_along_axis(jax.nn.log_softmax(logits), clean[:, 1:, None], -1)[..., 0]
    return jnp.mean(jnp.sum(logp * mask, -1))

  @jax.jit
  def directional(direction, a):
    return jax.jvp(lambda d: f(d, a), (jnp.zeros_like(z),), (direction,))[1]

  want = np.zeros((2, 2))
  for layer in range(2):
    for h in range(2):
      direction = jnp.zeros_like(z).at[layer, :, :, h].set((z - z0)[layer, :, :, h])
      want[layer, h] = np.mean([directional(direction, a)
                                for a in (np.arange(steps) + 0.5) / steps])
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # identical rows: nothing to attribute
  np.testing.assert_allclose(ag.eap_ig_heads(net, clean, clean, mask, steps), 0.0, atol=1e-7)
