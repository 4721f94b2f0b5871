"""The CoCoMix experiment: its smoke results' shape (the smoke run executes in the Colab
notebook's test, which checks it with :func:`check_smoke_results`), the FLOPs count, and
the report rows on hand-built results."""

import json
import math
import pathlib

import pytest

from experiments import cocomix as ccm_exp
from experiments.reporting import check_claims

NAMES = ["NTP", "KD", "CoCoMix", "interleave only (λ=0)", "concept loss only"]


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.cocomix --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke"
  cfg = saved["config"]
  assert [a["name"] for a in saved["arms"]] == NAMES
  for name in NAMES:
    ce = saved["final"][name]["ce"]
    assert len(ce) == cfg["seeds"]
    assert all(0 < v < math.log(cfg["vocab"] + 5) for v in ce)  # below the uniform guess
    assert len(saved["curves"][name]["ce"][0]) == cfg["num_evals"]
  assert all(0 < v < 1.5 for v in saved["sae_nmse"])
  check_claims(ccm_exp.claims(saved))
  for name in saved["figures"]:
    assert (out / name).stat().st_size > 0, name


def test_flops_count_by_hand():
  cfg = dict(ccm_exp.CONFIGS["smoke"])
  d, t, v, c = cfg["d_model"], cfg["seq_len"], cfg["vocab"] + 5, cfg["latents"]
  layer = lambda n: n * (12 * d * d + 2 * n * d)  # noqa: E731  (mlp_ratio 4)
  arms = {a["name"]: a for a in ccm_exp.arms(cfg)}
  ntp = 6 * cfg["batch"] * (2 * layer(t) + t * d * v)
  assert ccm_exp.train_flops(cfg, arms["NTP"]) == pytest.approx(ntp)
  ccm = 6 * cfg["batch"] * (layer(t) + layer(2 * t) + 2 * t * d * c + t * d * v)
  assert ccm_exp.train_flops(cfg, arms["CoCoMix"]) == pytest.approx(ccm)
  teacher = 2 * cfg["batch"] * (2 * layer(t) + t * d * v)
  assert ccm_exp.train_flops(cfg, arms["KD"]) == pytest.approx(ntp + teacher)


def _synthetic(ccm=(1.90, 2.00), kd=(1.95, 2.02), ablations=(1.97, 2.05)):
  """Two seeds, five arms; CoCoMix costs twice NTP's FLOPs per step."""
  base = {"NTP": (2.0, 2.1), "KD": kd, "CoCoMix": ccm, "interleave only (λ=0)": ablations,
          "concept loss only": ablations}
  arms = [{"name": n} for n in NAMES]
  final, curves = {}, {}
  for n, (a, b) in base.items():
    fl = 2.0 if n in ("CoCoMix", "interleave only (λ=0)") else 1.0
    final[n] = {"ce": [a, b], "flops_per_step": fl}
    curves[n] = {"eval_steps": [1, 2], "eval_flops": [fl, 2 * fl],
                 "ce": [[a + 0.5, a], [b + 0.5, b]]}
  return {"arms": arms, "final": final, "curves": curves}


def test_claims_on_synthetic_results():
  rows = check_claims(ccm_exp.claims(_synthetic()))
  assert len(rows) == 4
  # equal FLOPs: NTP's final budget 2 is CoCoMix's first evaluation (CE + 0.5): worse
  assert [r.held for r in rows] == [True, True, False, True]
  assert "lower in 2/2" in rows[0].measured
  rows = ccm_exp.claims(_synthetic(ccm=(2.05, 2.2), kd=(1.9, 2.0), ablations=(2.0, 2.1)))
  assert [r.held for r in rows][:2] == [False, False] and rows[3].held is False
  assert ccm_exp.claims({"arms": [], "final": {}}) == []
