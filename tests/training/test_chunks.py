import jax.numpy as jnp
import numpy as np

from jaxlab.training import run_chunks


def _chunk(i, carry, counter):
  # a deterministic "training" chunk: x <- 0.5 x + i, counting steps
  x = carry["x"] * 0.5 + i
  return {"x": x, "step": carry["step"] + 1}, {"x_mean": x.mean()}, counter + 10


def test_resume_ends_where_an_uninterrupted_run_does(tmp_path):
  init = {"x": jnp.arange(4.0), "step": jnp.int32(0)}
  full, history = run_chunks(init, 5, _chunk)
  part, partial = run_chunks(init, 5, _chunk, checkpoint_dir=str(tmp_path), stop_after=2)
  assert len(partial) == 2 and int(part["step"]) == 2
  resumed, history2 = run_chunks(init, 5, _chunk, checkpoint_dir=str(tmp_path))
  np.testing.assert_array_equal(resumed["x"], full["x"])
  assert int(resumed["step"]) == 5 and resumed["x"].dtype == full["x"].dtype
  np.testing.assert_array_equal([h["x_mean"] for h in history2],
                                [h["x_mean"] for h in history])
