"""CoCoMix: TopK sparsity, the SAE loss by hand, attribution against jax.grad, the student
with interleaving off against the plain transformer, the concept loss by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.lm import cocomix as cm
from jaxlab.models import transformer as tfm

CFG = tfm.TransformerConfig(vocab_size=11, d_model=16, num_heads=2, num_layers=2, seq_len=8)


@pytest.fixture(scope="module")
def net():
  return tfm.create(CFG, jax.random.key(0))


def test_topk_keeps_exactly_k_latents():
  sae = cm.init_sae(jax.random.key(0), 16, 40)
  h = jax.random.normal(jax.random.key(1), (3, 5, 16))
  pre = cm.layer_norm0(h)[0] @ sae.w_enc  # b_pre = b_lat = 0
  c = jax.jit(cm.sae_encode, static_argnums=2)(sae, h, 7)
  np.testing.assert_array_equal(np.asarray(cm.topk_mask(pre, 7)).sum(-1), 7)
  # the nonzero latents are the positive ones among the 7 largest pre-activations
  kth = np.sort(np.asarray(pre), -1)[..., -7][..., None]
  expect = np.where(np.asarray(pre) >= kth, np.maximum(np.asarray(pre), 0), 0)
  np.testing.assert_allclose(np.asarray(c), expect, rtol=1e-5, atol=1e-6)
  assert np.all((np.asarray(c) != 0).sum(-1) <= 7) and np.all((np.asarray(c) != 0).sum(-1) >= 1)


def test_layer_norm0_and_sae_loss_by_hand():
  h = jnp.array([[1.0, 3.0], [2.0, 2.5]])  # LN_0 of a 2-vector: (-1, 1) up to eps
  x, mu, sigma = cm.layer_norm0(h, eps=0.0)
  np.testing.assert_allclose(np.asarray(x), [[-1, 1], [-1, 1]], atol=1e-6)
  np.testing.assert_allclose(np.asarray(mu)[:, 0], [2.0, 2.25])
  np.testing.assert_allclose(np.asarray(sigma)[:, 0], [1.0, 0.25])
  # one latent along (-1, 1) / sqrt 2, k = 1, tied decoder: pre = sqrt 2, reconstruction
  # (-1, 1) exactly for both rows -> loss 0; with b_lat = -1 the reconstruction shrinks
  w = jnp.array([[-1.0], [1.0]]) / jnp.sqrt(2.0)
  sae = cm.SAEParams(w, jnp.array([-1.0]), w.T, jnp.zeros(2))
  h2 = jnp.array([[1.0, 3.0], [4.0, 2.0]])  # LN_0: (-1, 1) and (1, -1) (eps 1e-5 aside)
  loss, info = cm.sae_loss(sae, h2, 1)
  # row 1: pre = sqrt2 - 1 -> x~ = (sqrt2-1)(-1,1)/sqrt2; row 2: pre < 0 -> 0
  a = (np.sqrt(2) - 1) / np.sqrt(2)
  err = 2 * (1 - a) ** 2 + 2 * 1.0
  total = 4.0  # mean of x^ over rows is 0, |x^|^2 = 2 per row
  assert float(loss) == pytest.approx(err / total, rel=1e-4)
  assert float(info["sae/mse"]) == pytest.approx(err / 4, rel=1e-4)


def test_attribution_against_jax_grad(net):
  """``a_i`` is dL/d eps_i when latent i's decoder direction is added eps_i c_i times."""
  layer, k = 1, 5
  tokens = jax.random.randint(jax.random.key(2), (2, 7), 0, CFG.vocab_size)
  sae = cm.init_sae(jax.random.key(3), CFG.d_model, 12)

  @jax.jit
  def run(params):
    model = net.module(params)
    labels, a = cm.attribution_labels(model, sae, tokens, layer, k)
    h = cm.teacher_hidden(model, tokens[:, :-1], layer)
    c = cm.sae_encode(sae, h, k)

    def loss(eps):  # eps (B, T, C)
      h2 = h + (eps * c) @ sae.w_dec
      logits = model.head(model.ln_f(cm.run_blocks(model, h2, layer, CFG.num_layers)))
      return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

    hidden = model.forward(tokens[:, :-1], return_hidden=True).hidden[layer]
    return labels, a, h, hidden, jax.grad(loss)(jnp.zeros_like(c))

  labels, a, h, hidden, ref = (np.asarray(x) for x in run(net.params))
  np.testing.assert_allclose(h, hidden, atol=1e-5)  # the hidden index is forward's
  np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-9)
  assert np.abs(a).max() > 0
  # the labels are the 4 largest attributions (ties at 0 for inactive latents: by value)
  np.testing.assert_allclose(np.take_along_axis(ref, labels, -1),
                             -np.sort(-ref, -1)[..., :4], rtol=1e-4, atol=1e-9)
  assert labels.shape == (2, 6, 4) and labels.dtype == np.int32


def test_student_without_interleaving_equals_the_transformer(net):
  tokens = jax.random.randint(jax.random.key(4), (3, 8), 0, CFG.vocab_size)
  t2 = tokens.at[:, -1].set((tokens[:, -1] + 1) % CFG.vocab_size)
  head = cm.init_concept_head(jax.random.key(5), CFG.d_model, 12, std=0.5)

  @jax.jit
  def run(params):
    model = net.module(params)
    fwd = lambda x, on: cm.student_forward(model, head, x, insert_layer=1, k=3,  # noqa: E731
                                           interleave=on)[0]
    return (model(tokens), fwd(tokens, jnp.array(False)), fwd(tokens, False),
            fwd(tokens, jnp.array(True)), fwd(t2, jnp.array(True)))

  plain, off, static, on, other = (np.asarray(x) for x in run(net.params))
  np.testing.assert_allclose(off, plain, atol=1e-5)
  np.testing.assert_allclose(static, plain, atol=1e-5)
  assert np.abs(on - plain).max() > 1e-3  # interleaving changes the logits ...
  # ... and stays causal: changing the last token leaves earlier positions alone
  np.testing.assert_allclose(other[:, :-1], on[:, :-1], atol=1e-5)


def test_concept_loss_and_kd_by_hand():
  z = jnp.log(jnp.array([[0.5, 0.25, 0.125, 0.125]]))
  labels = jnp.array([[0, 2]])
  assert float(cm.concept_loss(z, labels)) == pytest.approx(
      -(np.log(0.5) + np.log(0.125)) / 2, rel=1e-6)
  p, q = jnp.log(jnp.array([[0.5, 0.5]])), jnp.log(jnp.array([[0.75, 0.25]]))
  assert float(cm.kd_loss(q, p)) == pytest.approx(0.5 * np.log(0.5 / 0.75)
                                                  + 0.5 * np.log(0.5 / 0.25), rel=1e-6)
  assert float(cm.kd_loss(p, p)) == pytest.approx(0.0, abs=1e-7)


def test_bad_arguments_raise(net):
  model = net.module()
  head = cm.init_concept_head(jax.random.key(0), CFG.d_model, 4)
  with pytest.raises(ValueError, match="insert_layer"):
    cm.student_forward(model, head, jnp.zeros((1, 4), jnp.int32), insert_layer=3, k=2)
