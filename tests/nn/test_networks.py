"""Net, the one way jaxlab holds a network, and the shared MLP."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxlab.nn import MLP, Net


def test_net_applies_with_its_or_given_params_and_unpacks_as_the_older_pair():
  module = MLP(3, [8], 2, rngs=nnx.Rngs(0))
  x = jnp.ones((4, 3))
  expected = module(x)
  net = Net.create(module)
  np.testing.assert_array_equal(net(x), expected)
  doubled = jax.tree.map(lambda p: 2 * p, net.params)
  np.testing.assert_array_equal(net(x, params=doubled), nnx.merge(net.graphdef, doubled)(x))
  graphdef, params = net  # the (graphdef, params) pair that nnx.split returns
  ref_graphdef, ref_params = nnx.split(module)
  assert graphdef == ref_graphdef
  assert jax.tree.structure(params) == jax.tree.structure(ref_params)
  # a Net is a pytree: vmap over seeds gives a Net with a leading axis on its params only
  nets = jax.vmap(lambda k: Net.create(MLP(3, [8], 2, rngs=nnx.Rngs(k))))(
      jax.random.split(jax.random.key(1), 2))
  assert isinstance(nets, Net) and jax.tree.leaves(nets.params)[0].shape[0] == 2
  assert jax.vmap(lambda n: n(x))(nets).shape == (2, 4, 2)


def test_mlp_features_are_the_last_hidden_activations():
  x = jnp.linspace(-1.0, 1.0, 12).reshape(4, 3)

  @jax.jit
  def check(net):
    module = net.module()
    h = x
    for i, layer in enumerate(module.hidden):  # the forward pass written out by hand
      h = jax.nn.gelu(h @ layer.kernel[...] + layer.bias[...])
      if len(module.norms):
        h = module.norms[i](h)
    feats = module.features(x)
    return feats, h, module(x), module.out(feats)

  for layer_norm in (False, True):
    feats, h, logits, from_feats = check(
        Net.create(MLP(3, [8, 5], 2, layer_norm=layer_norm, rngs=nnx.Rngs(0))))
    assert feats.shape == (4, 5)
    np.testing.assert_allclose(feats, h, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(logits, from_feats)
