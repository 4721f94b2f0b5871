"""The shared velocity MLP of the generative experiments."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.generative.nets import velocity_field, velocity_mlp
from jaxlab.models.ddpm import timestep_embedding


def test_field_is_the_mlp_on_data_embedding_and_condition():
  net = velocity_mlp(4, (8,), cond_dim=3, emb_dim=6, seed=1)
  x = jax.random.normal(jax.random.key(0), (5, 4))
  obs = jax.nn.one_hot(jnp.arange(5) % 3, 3)
  t = jnp.linspace(0.0, 1.0, 5)[:, None]
  want = net(jnp.concatenate([x, timestep_embedding(250.0 * t[:, 0], 6), obs], -1))
  got = velocity_field(net, net.params, emb_dim=6, time_scale=250.0)(obs, x, t)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert got.shape == (5, 4)
  # unconditional: a (B, 0) condition
  free = velocity_mlp(4, (8,), emb_dim=6)
  assert velocity_field(free, free.params, emb_dim=6)(jnp.zeros((5, 0)), x, t).shape == (5, 4)


def test_bad_sizes_raise():
  with pytest.raises(ValueError, match="data_dim must be a positive int"):
    velocity_mlp(0, (8,))
  with pytest.raises(ValueError, match="cond_dim must be an int >= 0"):
    velocity_mlp(4, (8,), cond_dim=-1)
