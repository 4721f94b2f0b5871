"""The masked CLIP loss of the digit-pair dual encoder (the test bed: tests/data)."""

import jax.numpy as jnp
import numpy as np

from jaxlab.preference import digit_pairs as D


def test_clip_loss_by_hand_and_masking():
  s = jnp.array([[2.0, 0.0], [1.0, 3.0]])
  row = [np.log(np.exp(2) + 1) - 2, np.log(np.exp(1) + np.exp(3)) - 3]
  col = [np.log(np.exp(2) + np.exp(1)) - 2, np.log(1 + np.exp(3)) - 3]
  np.testing.assert_allclose(D.clip_loss(s), np.mean([(r + c) / 2 for r, c in zip(row, col,
                                                                                     strict=True)]),
                             rtol=1e-6)
  # Dropping item 1 leaves item 0 alone: no negatives, zero loss.
  np.testing.assert_allclose(D.clip_loss(s, jnp.array([1.0, 0.0])), 0.0, atol=1e-7)
