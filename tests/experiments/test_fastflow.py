"""The FastFlow experiment.

Its ``--smoke`` pipeline runs once per suite, in its Colab notebook
(``tests/colab/test_notebooks.py::test_notebook_runs[fastflow]``), which then calls
:func:`check_smoke_results` on the output; the rest of this module tests claims() on
hand-built results."""

import json
import pathlib

import numpy as np

from experiments import fastflow as ffx


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.fastflow --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  for name in ("fastflow_curves.png", "fastflow_samples.png"):
    assert (out / name).stat().st_size > 0
  run, cfg = saved["runs"][0], saved["config"]
  assert [p["nfe"] for p in run["euler"]] == list(cfg["euler_nfe"])
  # caching every other step of a 2n grid: n evaluations, and the same samples as n-step Euler
  assert [p["nfe"] for p in run["caching"]] == list(cfg["caching_nfe"])
  eul = {p["nfe"]: p for p in run["euler"]}
  for p in run["caching"]:
    if p["nfe"] in eul:
      np.testing.assert_allclose(p["l2"], eul[p["nfe"]]["l2"], rtol=1e-3, atol=1e-5)
  assert eul[ffx.REF_STEPS]["l2"] == 0.0
  assert len(run["fastflow"]) == len(cfg["cs"]) * len(cfg["gammas"]) * len(cfg["lambdas"])
  for p in run["fastflow"]:
    # forced: steps 0, 1 and the last; at most 50, at least 2 + one eval per 7 steps + last
    assert 4 <= p["nfe"] <= ffx.REF_STEPS
    share = p["evaluated_share"]
    assert share[0] == share[1] == share[-1] == 1.0
    assert np.isclose(sum(share), p["nfe"], atol=1e-2)
  assert len(ffx.claims(saved)) in (1, 3)


def _result(points, fd_ref=(10.0, 10.0)) -> dict:
  """Hand-built runs: ``points`` per seed = (nfe, l2, fd) of one FastFlow setting; baselines
  with L2 0.2 at NFE 20 and 0.1 at NFE 30 (so 0.15 at NFE 25)."""
  runs = []
  for s, (nfe, l2, fd) in enumerate(points):
    base = [{"nfe": 20.0, "l2": 0.2, "fd": 11.0}, {"nfe": 30.0, "l2": 0.1, "fd": 10.5}]
    runs.append({"fd_ref": fd_ref[s], "euler": base, "caching": base, "fastflow": [
        {"c": 2.0, "gamma": 1.0, "lambda": 0.01, "nfe": nfe, "l2": l2, "fd": fd},
        {"c": 2.0, "gamma": 1.0, "lambda": 0.0, "nfe": 45.0, "l2": 0.01, "fd": 10.0}]})
  return {"runs": runs, "config": {}}


def test_claims_on_hand_built_results():
  good = _result([(25.0, 0.12, 10.5), (24.0, 0.13, 10.8)])
  assert [c.held for c in ffx.claims(good)] == [True, True, True]
  assert "lambda=0.01" in ffx.claims(good)[0].measured
  # FD 30% worse; L2 above both baselines at NFE 25 (0.15)
  bad = _result([(25.0, 0.2, 13.0), (25.0, 0.18, 13.0)])
  assert [c.held for c in ffx.claims(bad)] == [False, False, False]
  # better than caching on average but not in every seed
  mixed = _result([(25.0, 0.05, 10.0), (25.0, 0.16, 10.0)])
  assert [c.held for c in ffx.claims(mixed)] == [True, True, False]
  # no setting reaches NFE <= 27.5: one failed claim
  slow = _result([(40.0, 0.01, 10.0), (40.0, 0.01, 10.0)])
  rows = ffx.claims(slow)
  assert len(rows) == 1 and rows[0].held is False
  assert ffx.claims({"runs": []}) == []
