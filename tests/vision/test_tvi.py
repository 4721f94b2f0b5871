"""TVI against references: the distance against numpy, the VIP rule on hand-built profiles
(and a brute-force loop), TVI = 0 on a model whose blind and sighted passes are equal, and
the regulariser's gradient direction."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.data import digit_questions as dq
from jaxlab.data import load_digits
from jaxlab.nn import Net
from jaxlab.vision import tvi

CFG = tvi.VLMConfig(num_layers=2, d_model=16, num_heads=2, num_patches=4, patch_dim=16)


@pytest.fixture(scope="module")
def questions():
  d = load_digits("unit_images")
  return dq.make_questions(jax.random.key(0), d.x[:200], d.y[:200], 16, patch=4)


@pytest.fixture(scope="module")
def net():
  return tvi.create(CFG, jax.random.key(1))


@pytest.fixture(scope="module")
def passes():
  """One jitted program: (dist, vt, vis, blind, blind pass alone, logits from the last
  hidden state) of a model's two passes."""
  @jax.jit
  def run(params, patches, text):
    net = tvi.graph(CFG).replace(params=params)
    vis, blind = tvi.chain_of_embedding(net, patches, text)
    m = net.module()
    return (tvi.layer_distances(vis.hidden, blind.hidden), tvi.vt_split(vis.logits, blind.logits),
            vis, blind, net(patches, text, True), m.lm.head(m.lm.ln_f(vis.hidden[-1])))
  return run


def test_cosine_distance_against_numpy():
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(5, 7, 9)), rng.normal(size=(5, 7, 9))
  ref = 1 - np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
  np.testing.assert_allclose(jax.jit(tvi.cosine_distance)(a, b), ref, rtol=1e-5, atol=1e-6)
  x = jnp.array([1.0, 2.0, -3.0])
  assert float(tvi.cosine_distance(x, 5 * x)) == pytest.approx(0.0, abs=1e-6)
  assert float(tvi.cosine_distance(x, -x)) == pytest.approx(2.0, abs=1e-6)
  assert float(tvi.cosine_distance(jnp.array([1.0, 0.0]), jnp.array([0.0, 3.0]))) == 1.0


def test_layer_profile_is_the_masked_mean():
  rng = np.random.default_rng(1)
  dist = rng.uniform(size=(4, 10)).astype(np.float32)
  mask = np.arange(10) % 3 == 0
  np.testing.assert_allclose(tvi.layer_profile(dist, mask), dist[:, mask].mean(1), rtol=1e-6)
  assert np.all(np.isnan(tvi.layer_profile(dist, np.zeros(10, bool))))  # empty set


def _vip_brute(gap, tau):
  n = len(gap)
  for l in range(n):
    if all(g > tau for g in gap[l:]):  # NaN > tau is False, as in the rule
      return l
  return n


@pytest.mark.parametrize("gap, tau, want", [
    ([0.0, 0.01, 0.2, 0.3, 0.25], 0.1, 2),  # rises and stays above
    ([0.0, 0.2, 0.05, 0.3, 0.4], 0.1, 3),  # above at 1, dips at 2: the suffix starts at 3
    ([0.0, 0.3, 0.3, 0.05], 0.1, 4),  # the last layer fails: no VIP (L + 1)
    ([0.5, 0.5, 0.5], 0.1, 0),  # every layer
    ([0.0, 0.2, np.nan, 0.2], 0.1, 3),  # NaN is not above tau
    ([0.0, 0.1, 0.1], 0.1, 3),  # strictly above
])
def test_vip_rule_on_hand_built_profiles(gap, tau, want):
  t = np.full(len(gap), 0.25, np.float32)
  vt = t + np.asarray(gap, np.float32)
  got = jax.jit(tvi.visual_integration_point)(vt, t, tau)
  assert int(got) == want == _vip_brute(list(vt - t), tau)


def test_vip_rule_against_brute_force_and_vmap():
  rng = np.random.default_rng(2)
  gaps = rng.choice([-0.1, 0.05, 0.2], size=(64, 5)).astype(np.float32)
  got = jax.vmap(tvi.visual_integration_point, (0, None, None))(gaps, jnp.zeros(5), 0.1)
  assert [int(g) for g in got] == [_vip_brute(list(g), 0.1) for g in gaps]
  # every pattern of 4 layers above / below
  for bits in itertools.product([0.0, 1.0], repeat=4):
    gap = np.array(bits, np.float32)
    assert int(tvi.visual_integration_point(gap, np.zeros(4), 0.5)) == _vip_brute(gap, 0.5)


def test_auto_tau_is_a_share_of_the_peak_gap():
  vt = jnp.array([0.0, 0.05, 0.25, 0.5, 0.45])
  t = jnp.array([0.0, 0.05, 0.1, 0.1, 0.1])  # gap 0, 0, 0.15, 0.4, 0.35
  tau = tvi.auto_tau(vt, t, 0.5)
  assert float(tau) == pytest.approx(0.2)
  assert int(tvi.visual_integration_point(vt, t, tau)) == 3
  assert float(tvi.auto_tau(vt, t.at[0].set(jnp.nan), 0.5)) == pytest.approx(0.2)
  with pytest.raises(ValueError, match="share"):
    tvi.auto_tau(vt, t, 1.5)


def test_tvi_and_pre_vip_scores_against_numpy():
  rng = np.random.default_rng(3)
  dist = rng.uniform(size=(5, 6)).astype(np.float32)  # L = 4
  for vip in range(6):
    want = dist[vip:].mean(0) if vip <= 4 else np.zeros(6)
    np.testing.assert_allclose(jax.jit(tvi.tvi_score)(dist, vip), want, rtol=1e-6)
    pre = dist[1:vip].mean(0) if vip > 1 else np.zeros(6)
    np.testing.assert_allclose(tvi.pre_vip_score(dist, vip), pre, rtol=1e-6)


def test_hidden_chain_is_the_transformers(net, questions, passes):
  # the last layer's hidden state gives the logits through the final LayerNorm and head
  dist, _, vis, blind, alone, head = passes(net.params, questions.patches, questions.text)
  np.testing.assert_allclose(head, vis.logits, atol=1e-5)
  assert vis.hidden.shape == (CFG.num_layers + 1, 16, CFG.d_model)
  # the embedding layer is the last text token's embedding in both passes: d_0 = 0
  np.testing.assert_allclose(dist[0], 0.0, atol=1e-6)
  assert float(dist[1:].min()) > 0  # the image reaches the last token
  # the batched pass equals a separate call
  np.testing.assert_allclose(alone.hidden, blind.hidden, atol=1e-5)


def test_equal_passes_give_zero_tvi_and_no_vip(net, questions, passes):
  """A model whose patch embedding is constant and equal to the null token: every image
  looks blind, so the two passes are the same computation."""
  m = net.module(jax.tree.map(jnp.copy, net.params))  # a copy: merge shares the Variables
  m.patch_embed.kernel[...] = jnp.zeros_like(m.patch_embed.kernel[...])
  m.patch_embed.bias[...] = m.null[...]
  params = Net.create(m).params
  assert float(jnp.abs(net.params["patch_embed"]["kernel"][...]).max()) > 0  # untouched
  dist, vt, vis, blind, _, _ = passes(params, questions.patches, questions.text)
  np.testing.assert_allclose(vis.hidden, blind.hidden, atol=0)
  np.testing.assert_allclose(dist, 0.0, atol=1e-6)
  assert not bool(vt.any())  # D_VT is empty
  p_vt, p_t = tvi.layer_profile(dist, vt), tvi.layer_profile(dist, ~vt)
  np.testing.assert_allclose(p_t, 0.0, atol=1e-6)
  assert np.all(np.isnan(p_vt))
  assert int(tvi.visual_integration_point(p_vt, p_t, 0.0)) == CFG.num_layers + 1  # no VIP
  # and with a nonempty D_VT at zero distance, the gap 0 is never above tau >= 0
  assert int(tvi.visual_integration_point(p_t, p_t, 0.0)) == CFG.num_layers + 1
  for vip in range(CFG.num_layers + 2):
    np.testing.assert_allclose(tvi.tvi_score(dist, vip), 0.0, atol=1e-6)


def test_regulariser_gradient_increases_tvi(net, questions, passes):
  q = questions
  vip = 1

  @jax.jit
  def loss_grad(params, lam):
    loss = lambda p: tvi.tvi_loss(net.replace(params=p), q.patches, q.text, q.answer, vip,  # noqa: E731
                                  lam)
    return jax.value_and_grad(loss, has_aux=True)(params)

  (l0, info0), g0 = loss_grad(net.params, 0.0)
  (l1, info1), g1 = loss_grad(net.params, 0.03)
  # lambda = 0 is the plain cross-entropy of the sighted pass
  logits = passes(net.params, q.patches, q.text)[2].logits
  ce = -jax.nn.log_softmax(logits)[jnp.arange(16), q.answer].mean()
  assert float(l0) == pytest.approx(float(ce), rel=1e-5)
  assert float(l1) == pytest.approx(float(ce) - 0.03 * float(info1["loss/tvi"]), rel=1e-5)
  # the regulariser's part of the gradient, -lambda grad TVI, points to higher TVI:
  # a small step against it (descent on the regulariser) raises the mean TVI
  diff = jax.tree.map(lambda a, b: a - b, g1, g0)
  norm = jnp.sqrt(sum(jnp.sum(x ** 2) for x in jax.tree.leaves(diff)))
  assert float(norm) > 0
  step = jax.tree.map(lambda p, d: p - 1e-2 * d / norm, net.params, diff)
  (_, info_step), _ = loss_grad(step, 0.0)
  assert float(info_step["loss/tvi"]) > float(info0["loss/tvi"])
  # and a step the other way lowers it
  back = jax.tree.map(lambda p, d: p + 1e-2 * d / norm, net.params, diff)
  (_, info_back), _ = loss_grad(back, 0.0)
  assert float(info_back["loss/tvi"]) < float(info0["loss/tvi"])


def test_bad_input_raises():
  with pytest.raises(ValueError, match="num_layers"):
    tvi.VLMConfig(num_layers=0)
  with pytest.raises(ValueError, match="num_heads"):
    tvi.VLMConfig(d_model=10, num_heads=4)
  with pytest.raises(ValueError, match="profile_vt"):
    tvi.visual_integration_point(jnp.zeros(3), jnp.zeros(4), 0.1)
  with pytest.raises(ValueError, match="h_vis"):
    tvi.layer_distances(jnp.zeros((3, 2, 4)), jnp.zeros((3, 2, 5)))
  with pytest.raises(ValueError, match="text"):
    tvi.chain_of_embedding(tvi.create(CFG, jax.random.key(0)), jnp.zeros((2, 4, 16)),
                           jnp.zeros((3, 6), jnp.int32))

