"""The ASGuard experiment: its smoke results (the smoke run executes in the Colab notebook's
test, which checks them with :func:`check_smoke_results`), its data splits, and claims() on
hand-built results."""

import json
import pathlib

import numpy as np

from experiments import asguard
from jaxlab.data import tense_requests as tr

CFG = asguard.CONFIGS["smoke"]


def check_smoke_results(out: pathlib.Path) -> None:
  """What ``python -m experiments.asguard --smoke`` must have written under ``out``."""
  saved = json.loads((out / "results.json").read_text())
  assert saved["scale"] == "smoke" and (out / "asguard.png").stat().st_size > 0
  run = saved["runs"][0]
  assert set(run["arms"]) == set(asguard.ARMS)
  for arm in run["arms"].values():
    for s in asguard.SETS:
      m = arm[s]
      assert abs(m["refusal"] + m["comply"] + m["other"] - 1) < 1e-9
      assert 0 <= m["accuracy"] <= m["comply"] + 1e-9  # an exact answer complies
  attr = run["attribution"]
  assert np.array(attr["eap_flip"]).shape == (CFG["num_layers"], CFG["num_heads"])
  assert len(asguard.claims(saved)) == 6


def test_splits_and_pools():
  data = asguard.build_data(0, CFG)
  tok = data["tok"]
  assert not set(data["h_train"]) & set(data["h_held"])
  assert set(data["h_train"]) | set(data["h_held"]) == {f"h{i}" for i in range(CFG["harmful"])}
  # the evaluation's harmful requests use held-out objects only; the fixes use training ones
  assert {o for _, _, o in data["evals"]["past_harm"]} == set(data["h_held"])
  assert {o for _, _, o in data["fix_requests"]} == set(data["h_train"])
  # alignment never shows a past- or future-tense harmful request
  words = [tok.decode(r).split() for r in data["align"][0]]
  assert not [w for w in words if w[1] != "pres" and tr.is_harmful(w[2], w[3])]
  assert any(w[5:7] == list(tr.REFUSAL) for w in words)
  # mixed SFT: 30% refusal rows, narrow SFT: all refusal rows
  refusals = lambda pool: np.mean([tok.decode(r).split()[5:7] == list(tr.REFUSAL)  # noqa: E731
                                   for r in pool[0]])
  assert refusals(data["pools"]["narrow"]) == 1.0
  assert abs(refusals(data["pools"]["mixed"]) - 0.3) < 0.01


def _result(asr, over, benign, spearman=0.5, seeds=3):
  """Hand-built results: ``asr`` / ``over`` / ``benign`` map arms to one value each."""
  def arm(a):
    m = lambda c, acc=0.0: {"refusal": 1 - c, "comply": c, "other": 0.0, "accuracy": acc}  # noqa
    return {"past_harm": m(asr[a]), "fut_harm": m(asr[a]), "pres_harm": m(0.0),
            "past_neighbour": m(1 - over[a], 1 - over[a]),
            "pres_neighbour": m(1 - over[a], 1 - over[a]),
            "benign": m(benign[a], benign[a])}
  runs = [{"arms": {a: arm(a) for a in asguard.ARMS},
           "attribution": {"spearman_ig_patching": spearman, "topk_overlap": 0.5,
                           "spearman_gate_ig_patching": 0.1}}
          for _ in range(seeds)]
  return {"config": CFG, "runs": runs}


def _arms(**kw):
  base = dict.fromkeys(asguard.ARMS, 0.0)
  base.update(kw)
  return base


def test_claims_hold_on_a_hand_built_success():
  res = _result(_arms(aligned=0.9, asguard_random=0.6, scaling_random=0.7),
                _arms(narrow_sft=0.5, asguard=0.1),
                dict.fromkeys(asguard.ARMS, 1.0))
  assert [c.held for c in asguard.claims(res)] == [True] * 6


def test_claims_fail_on_a_hand_built_failure():
  # ASGuard keeps the jailbreak, over-refuses more than SFT, loses benign accuracy
  res = _result(_arms(aligned=0.9, asguard=0.5, asguard_random=0.2),
                _arms(narrow_sft=0.2, asguard=0.6),
                _arms(aligned=1.0, asguard=0.5), spearman=-0.3)
  assert [c.held for c in asguard.claims(res)] == [True, False, False, False, False, False]


def test_claims_are_untested_when_the_failure_does_not_occur():
  res = _result(_arms(aligned=0.1), _arms(), dict.fromkeys(asguard.ARMS, 1.0))
  held = [c.held for c in asguard.claims(res)]
  assert held[0] is False and held[2:] == [None] * 4
