"""The Lumos-1 experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[lumos]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

from experiments import lumos as lx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.lumos --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  for name in ("lumos_samples.png", "lumos_ce.png"):
    assert (out / name).stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == set(lx.ARMS)
  for arm in run["arms"].values():
    for key in ("pixel_acc_t2v", "static_acc_t2v", "pixel_acc_i2v", "ink_first_frame"):
      assert 0.0 <= arm[key] <= 1.0
    assert 0.0 < arm["ce_later_frames"] < 10.0 and len(arm["ce_per_frame"]) == 3
  assert len(run["grid"]["truth"]) == 4 and len(lx.claims(saved)) == 4


def _result(ce, acc, static=0.6) -> dict:
  runs = []
  for s in range(2):
    runs.append({"arms": {a: {"ce_later_frames": ce[a][s], "pixel_acc_t2v": acc[a][s],
                              "static_acc_t2v": static} for a in lx.ARMS}})
  return {"runs": runs, "config": {}}


def test_claims_on_hand_built_results():
  ce = {"lumos": (1.0, 1.1), "random_mask": (1.3, 1.2), "rope_1d": (1.2, 1.2),
        "rope_3d": (1.5, 1.4), "no_positions": (2.0, 2.1)}
  acc = {"lumos": (0.9, 0.88), "random_mask": (0.8, 0.85), "rope_1d": (0.85, 0.8),
         "rope_3d": (0.7, 0.7), "no_positions": (0.6, 0.6)}
  assert [c.held for c in lx.claims(_result(ce, acc))] == [True, True, True, True]
  # random masking better CE: claim 1 fails; 1-D RoPE better accuracy: claim 2 fails;
  # one seed under the static copy: claim 3 fails; no positions beats 3-D RoPE in a seed
  ce2 = {**ce, "random_mask": (0.9, 0.9), "no_positions": (2.0, 1.3)}
  acc2 = {**acc, "rope_1d": (0.95, 0.95), "lumos": (0.9, 0.55)}
  assert [c.held for c in lx.claims(_result(ce2, acc2))] == [False, False, False, False]
  assert lx.claims({"runs": []}) == []
