"""The EgoWorld experiment: its smoke results (checked on the Colab notebook's run), and
claims() on hand-built results."""

import json
import pathlib

import numpy as np

from experiments import egoworld


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.egoworld --smoke`` must have written under ``out`` (the smoke
  run executes once per suite, in the Colab notebook's test, which calls this on its output)."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  assert (out / "egoworld.png").exists() and (out / "egoworld_examples.png").exists()
  run = saved["runs"][0]
  kp, dn = saved["config"]["kp_noise"], saved["config"]["depth_noise"]
  for m in egoworld.METRICS:
    assert np.shape(run["grid"][m]) == (len(kp), len(dn))
  # noiseless: the pose is exact and the map is the oracle's
  assert run["noiseless"]["rot_deg"] < 0.01 and run["noiseless"]["psnr_gap_db"] < 0.05
  assert 0 < run["grid"]["coverage"][0][0] < 1
  assert run["grid"]["rot_deg"][1][0] > run["grid"]["rot_deg"][0][0]
  assert len(egoworld.claims(saved)) == 5


def _result(rot, psnr, raw, scale_err, exact=True, cov=0.3):
  """Two seeds; ``rot`` and ``psnr`` over keypoint levels, ``scale_err`` over depth levels."""
  kp, dn = len(rot), len(scale_err)
  runs = []
  for s in range(2):
    grid = {m: np.zeros((kp, dn)) for m in egoworld.METRICS}
    grid["rot_deg"][:, 0] = rot
    grid["psnr"][:, 0] = np.asarray(psnr) + 0.1 * s
    grid["unaligned_psnr"][0, 0] = raw
    grid["depth_scale_err"][0, :] = scale_err
    runs.append({"grid": {m: v.tolist() for m, v in grid.items()}, "oracle_coverage": cov,
                 "noiseless": {"psnr_gap_db": 0.0, "coverage_gap": 4.0 if exact else 5.0,
                               "rot_deg": 0.0, "trans_m": 0.0, "scale_err": 0.0,
                               "depth_scale_err": 0.0}})
  return {"runs": runs, "config": {"size": 64, "kp_noise": [0.0, 0.01, 0.02][:kp],
                                   "depth_noise": [0.0, 0.02][:dn]}}


def test_claims_on_hand_built_results():
  good = _result([0.0, 1.0, 2.0], [21.0, 20.5, 19.0], 17.0, [0.0, 0.01])
  assert [c.held for c in egoworld.claims(good)] == [True] * 5
  # 5 of 4,096 pixels' coverage off the oracle's (the limit is 0.1%: 4); rotation error not
  # rising; PSNR drop under 1 dB; scale off by 5%; unaligned as good; no holes
  bad = _result([0.0, 1.0, 0.9], [21.0, 20.5, 20.5], 20.8, [0.0, 0.05], exact=False, cov=0.95)
  assert [c.held for c in egoworld.claims(bad)] == [False] * 5
  assert egoworld.claims({"runs": []}) == []
