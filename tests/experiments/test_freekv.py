"""The FreeKV experiment and benchmark: the experiment's smoke run (it executes in the
notebook's test, which checks it with :func:`check_smoke_results`), the benchmark's smoke
run, and claims() on hand-built results that must hold and must fail."""

import json
import pathlib

from experiments import bench_freekv, freekv
from experiments.reporting import check_claims


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.freekv --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and saved["config"]["context"] == 48
  arms = saved["runs"][0]["arms"]
  assert list(arms) == freekv.arm_names(saved["config"]) == saved["arms"]
  for name, a in arms.items():
    assert 0.0 <= a["accuracy"] <= 1.0
    if name != "full":
      assert a["kl"] >= -1e-6 and 0.0 <= a["corrected"] <= 1.0 and -1 <= a["cosine"] <= 1
  assert arms["exact"]["corrected"] == 1.0 and arms["reuse"]["corrected"] == 0.0
  assert arms["tiny"]["pages_attended"] <= arms["exact"]["pages_attended"]
  assert len(check_claims(freekv.claims(saved))) == 4
  for name in saved["figures"]:
    assert (out / name).stat().st_size > 0, name


def _result(acc: dict, kl: dict | None = None, corrected: float = 0.1) -> dict:
  seeds = len(next(iter(acc.values())))
  arms = ["full", "exact", "freekv_0.9", "reuse", "tiny"]
  kl = kl or {}
  runs = [{"arms": {a: {"accuracy": acc[a][s], "kl": kl.get(a, [0.1] * seeds)[s],
                        "corrected": corrected, "corrected_at_keys": corrected,
                        "cosine": 0.9}
                    for a in arms}} for s in range(seeds)]
  return {"config": {"taus": [0.9]}, "arms": arms, "runs": runs}


def test_claims_on_hand_built_results():
  good = _result({"full": [0.98, 0.97], "exact": [0.95, 0.94], "freekv_0.9": [0.94, 0.95],
                  "reuse": [0.6, 0.7], "tiny": [0.1, 0.2]},
                 {"reuse": [1.0, 2.0], "freekv_0.9": [0.1, 0.2]})
  assert [c.held for c in freekv.claims(good)] == [True, True, True, True]
  # full recall low; FreeKV 5 points under exact; most head-steps corrected; reuse as good
  bad = _result({"full": [0.8, 0.85], "exact": [0.95, 0.94], "freekv_0.9": [0.9, 0.89],
                 "reuse": [0.9, 0.89], "tiny": [0.1, 0.2]}, corrected=0.9)
  assert [c.held for c in freekv.claims(bad)] == [False, False, False, False]
  assert freekv.claims({"runs": []}) == []


def test_bench_smoke_and_ratios(tmp_path):
  res = bench_freekv.main(["--smoke", "--out", str(tmp_path)])
  assert [c["context"] for c in res["contexts"]] == [64]
  rows = bench_freekv.ratios(json.loads((tmp_path / "results.json").read_text()))
  assert len(rows) == 2 * len(bench_freekv.ARMS) and all(r.ratio > 0 for r in rows)
  assert "offloaded KV pages" in (tmp_path / "summary.md").read_text()
