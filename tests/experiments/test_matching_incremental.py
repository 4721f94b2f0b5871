"""The matching experiment end to end at its smallest setting, and the instances."""

import json

import numpy as np
import pytest

from experiments import matching_incremental
from jaxlab import matching as M
from jaxlab.matching import instances


def test_smoke_run(tmp_path, capsys, monkeypatch):
  res = matching_incremental.main(["--smoke", "--out", str(tmp_path), "--algorithms",
                                   "push_relabel", "exact", "greedy"])
  saved = json.loads((tmp_path / "results.json").read_text())
  assert {r["family"] for r in saved["runs"]} == set(instances.FAMILIES)
  assert (tmp_path / "cost_ratio.png").stat().st_size > 0
  assert "| family | n | algorithm |" in capsys.readouterr().out
  for run in res["runs"]:
    algs = run["algorithms"]
    np.testing.assert_allclose(algs["exact"]["ratio"], 1.0, rtol=1e-4)  # exact = OPT
    assert min(algs["greedy"]["ratio"]) >= 1.0 - 1e-4
    assert algs["push_relabel"]["ratio"][-1] < algs["greedy"]["ratio"][-1] + 1e-6
  # A rerun with the same --out resumes: every instance is read back, none recomputed.
  assert len(list((tmp_path / "runs").glob("*.json"))) == len(instances.FAMILIES)
  monkeypatch.setattr(matching_incremental, "run_instance", None)  # fails if called
  again = matching_incremental.main(["--smoke", "--out", str(tmp_path), "--algorithms",
                                     "push_relabel", "exact", "greedy"])
  assert [r["algorithms"]["exact"]["costs"] for r in again["runs"]] == [
      r["algorithms"]["exact"]["costs"] for r in res["runs"]]


@pytest.mark.parametrize("family", instances.FAMILIES)
def test_instances_are_valid(family):
  servers, requests, metric = instances.make(family, 40, seed=1)
  c = M.cost_matrix(requests, servers, metric)
  assert c.shape == (40, 40) and np.all(np.isfinite(c)) and np.all(c >= 0)
  if family == "road_graph":  # request and server nodes are distinct graph nodes
    assert c.min() > 0
  with pytest.raises(ValueError, match="family"):
    instances.make("nyc", 10)
