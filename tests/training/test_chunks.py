import jax.numpy as jnp
import numpy as np
import pytest

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


def _init(n=4, dtype=jnp.float32):
  return {"x": jnp.arange(n, dtype=dtype), "step": jnp.int32(0)}


def test_resume_refuses_another_run_naming_the_field(tmp_path):
  d = str(tmp_path)
  run_chunks(_init(), 5, _chunk, checkpoint_dir=d, stop_after=2,
             fingerprint={"config": {"hidden": [16, 16]}, "keys": np.arange(2)})
  cases = [
      (dict(fingerprint={"config": {"hidden": [8, 8]}, "keys": np.arange(2)}),
       r"run\.config\.hidden\[0\] is 16 there, 8 now"),
      (dict(fingerprint={"config": {"hidden": [16, 16]}, "keys": np.arange(1, 3)}),
       r"run\.keys\[0\] is 0 there, 1 now"),
      (dict(num=6), "num_chunks is 5 there, 6 now"),
      (dict(init=_init(5)), r"carry_leaves\[1\] is 'float32\[4\]' there, 'float32\[5\]' now"),
      (dict(init=_init(4, jnp.int32)), "carry_leaves.*'float32\\[4\\]' there, 'int32\\[4\\]' now"),
  ]
  for kw, match in cases:
    args = {"num": 5, "init": _init(),
            "fingerprint": {"config": {"hidden": [16, 16]}, "keys": np.arange(2)}, **kw}
    with pytest.raises(ValueError, match=match):
      run_chunks(args["init"], args["num"], _chunk, checkpoint_dir=d,
                 fingerprint=args["fingerprint"])


def _corrupt(step_dir):
  for path in step_dir.rglob("*"):
    if path.is_file():
      path.write_bytes(b"\x00garbage")


def test_unreadable_newest_checkpoint_falls_back_to_the_previous_one(tmp_path):
  full, history = run_chunks(_init(), 5, _chunk)
  run_chunks(_init(), 5, _chunk, checkpoint_dir=str(tmp_path), stop_after=3)  # keeps steps 2, 3
  _corrupt(tmp_path / "3")
  with pytest.warns(UserWarning, match=r"step\(s\) \[3\].*unreadable.*previous intact step 2"):
    resumed, history2 = run_chunks(_init(), 5, _chunk, checkpoint_dir=str(tmp_path))
  np.testing.assert_array_equal(resumed["x"], full["x"])  # bit-identical to an uninterrupted run
  assert int(resumed["step"]) == 5
  np.testing.assert_array_equal([h["x_mean"] for h in history2], [h["x_mean"] for h in history])


def test_no_readable_checkpoint_raises(tmp_path):
  run_chunks(_init(), 5, _chunk, checkpoint_dir=str(tmp_path), stop_after=2)
  for step in ("1", "2"):
    _corrupt(tmp_path / step)
  with pytest.raises(ValueError, match="no readable checkpoint"):
    run_chunks(_init(), 5, _chunk, checkpoint_dir=str(tmp_path))
