"""Chunked runs with orbax checkpoints: an interrupted run resumes to the same result."""

import jax.numpy as jnp
import numpy as np

from jaxlab.rl.chunks import run_chunks


def _chunk(i, carry, counter):
  carry = {"x": carry["x"] * 1.5 + i, "n": carry["n"] + 1}
  return carry, {"i": np.asarray(i), "counter": np.asarray(counter)}, counter + 10


def test_interrupted_run_resumes_bit_for_bit(tmp_path):
  init = {"x": jnp.arange(3.0), "n": jnp.int32(0)}
  whole, history = run_chunks(init, 4, _chunk)
  ckpt = str(tmp_path / "ckpt")
  _, first = run_chunks(init, 4, _chunk, checkpoint_dir=ckpt, stop_after=2)
  assert [int(h["i"]) for h in first] == [0, 1]
  # same program, restored state: bit-identical carry, the saved history and the counter
  resumed, history2 = run_chunks(init, 4, _chunk, checkpoint_dir=ckpt)
  np.testing.assert_array_equal(resumed["x"], whole["x"])
  assert int(resumed["n"]) == 4 and resumed["n"].dtype == jnp.int32
  assert [int(h["i"]) for h in history2] == [0, 1, 2, 3]
  assert [int(h["counter"]) for h in history2] == [int(h["counter"]) for h in history] == [
      0, 10, 20, 30]
