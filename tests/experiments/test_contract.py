"""The contract over every registered method: verdicts come from the protocol.

For a method the registry marks as ported, its committed quick record is turned into
synthetic cases with stated noise (:func:`experiments.protocol.synthetic`: a planted effect of
2δ, a null effect of +δ/10, a reversed effect, a failed positive or negative control, a
baseline on its guard's bound, each with noise of sd δ/4 per unit) and its own ``claims()``
must answer held / refuted / refuted / cannot tell / cannot tell / cannot tell (a
non-inferiority claim: held on the null). A rule that decides on a mean's sign, or ignores a
control or a guard, fails here. A method not yet ported must answer "cannot tell: test bed
under repair" for every claim, whatever its script's own rule says.

The contract is also run on a fixture method (below) so that the check itself is tested,
including that it catches a mean-sign rule and a dropped control.
"""

import json
import os
import types

import numpy as np
import pytest

from experiments import methods, protocol

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def quick_record(module: str) -> dict:
  """The committed quick record: the method's own, else its entry in the run_all report."""
  path = os.path.join(ROOT, "docs", "results", module, "quick", "results.json")
  if not os.path.exists(path):
    path = os.path.join(ROOT, "docs", "results", "run_all", "quick", module, "results.json")
  with open(path) as f:
    return json.load(f)


def contract_failures(module, record: dict) -> list[str]:
  """Every (claim, case) where ``module.claims`` does not give the protocol's verdict, or
  differs in any row from ``protocol.decide(module.CLAIMS, ...)`` on the same record."""
  specs = list(module.CLAIMS)
  failures = []
  for i, spec in enumerate(specs):
    for case in protocol.cases(spec):
      rec = protocol.synthetic(spec, record, case, seed=i, specs=specs)
      rows = protocol.check_decisions(module.claims(rec))
      want = protocol.expected(spec, case)
      if rows[i].verdict != want:
        failures.append(f"claim {i} ({spec.claim}), {case}: {rows[i].text}, expected {want}")
      elif rows != protocol.decide(specs, rec):
        failures.append(f"claim {i} ({spec.claim}), {case}: claims() differs from "
                        "protocol.decide(CLAIMS) on the same record")
  return failures


PORTED = [m for m in methods.METHODS if m.ported]
UNPORTED = [m for m in methods.METHODS if not m.ported]


def test_some_method_is_ported():
  assert PORTED, "the contract must run on at least one real method (TTM is ported)"


@pytest.mark.parametrize("method", PORTED, ids=[m.module for m in PORTED])
def test_ported_method_keeps_the_contract(method):
  module = method.experiment()
  assert module.CLAIMS[0].primary
  assert not contract_failures(module, quick_record(method.module))


@pytest.mark.parametrize("method", UNPORTED, ids=[m.module for m in UNPORTED])
def test_unported_method_cannot_tell(method):
  decisions = protocol.method_decisions(method, quick_record(method.module))
  assert decisions and decisions[0].primary
  assert {d.verdict for d in decisions} == {"cannot tell"}
  assert all(d.reason.startswith(f"test bed under repair, issue {method.repair_issue}")
             for d in decisions)


# ---------------------------------------------------------------------------
# A fixture method: a superiority claim over seeds and a non-inferiority claim over items.

BEFORE = protocol.Arm("runs.*.before", label="before")
ITEMS_B = protocol.Arm("runs.*.items_before.*", label="before")
FIXTURE_CLAIMS = (
    protocol.ClaimSpec(
        claim="training raises accuracy", metric="accuracy", primary=True, margin=0.05,
        compare=protocol.Comparison(protocol.Arm("runs.*.after", label="after"), BEFORE),
        positive=protocol.Control("oracle labels", protocol.Comparison(
            protocol.Arm("runs.*.oracle"), BEFORE), 0.05),
        negative=protocol.Control("shuffled labels", protocol.Comparison(
            protocol.Arm("runs.*.shuffled"), BEFORE), 0.05, "negative"),
        guards=(protocol.Guard("accuracy before", BEFORE, 0.1, 1.0, 0.05),
                protocol.Guard("pre-training loss", protocol.Arm("runs.*.pretrain_loss"),
                               ceiling=2.3, distance=0.1))),
    protocol.ClaimSpec(
        claim="the cheap decoder loses no more than 0.1 nats", metric="NLL (nats)",
        kind="non-inferiority", unit="item", margin=0.1,
        compare=protocol.Comparison(protocol.Arm("runs.*.items_after.*"), ITEMS_B,
                                    higher_is_better=False),
        positive=protocol.Control("a 4x longer context", protocol.Comparison(
            protocol.Arm("runs.*.items_long.*"), ITEMS_B, higher_is_better=False), 0.1),
        negative=protocol.Control("a blank prompt", protocol.Comparison(
            protocol.Arm("runs.*.items_blank.*"), ITEMS_B, higher_is_better=False), 0.1,
            "negative"),
        guards=(protocol.Guard("NLL before", ITEMS_B, floor=0.0, distance=0.05),)),
)


def fixture_record(seeds: int = 3, items: int = 30) -> dict:
  rng = np.random.default_rng(1)
  runs = []
  for s in range(seeds):
    nll = rng.uniform(1.0, 2.0, items).tolist()
    runs.append({"seed": s, "before": 0.6, "after": 0.62, "oracle": 0.9, "shuffled": 0.6,
                 "pretrain_loss": 1.2,
                 **{f"items_{k}": list(nll) for k in ("before", "after", "long", "blank")}})
  return {"runs": runs, "provenance": {"git_dirty": False}}


def fixture_module(decide=None):
  return types.SimpleNamespace(
      CLAIMS=FIXTURE_CLAIMS,
      claims=decide or (lambda result: protocol.decide(FIXTURE_CLAIMS, result)))


def test_contract_holds_on_the_fixture():
  assert contract_failures(fixture_module(), fixture_record()) == []


def test_contract_catches_a_mean_sign_rule(monkeypatch):
  def sign_rule(interval, margin, kind):
    return ("held", "mean > 0") if interval.mean > 0 else ("refuted", "mean <= 0")

  monkeypatch.setattr(protocol, "rule", sign_rule)
  failures = contract_failures(fixture_module(), fixture_record())
  assert any("null: held" in f for f in failures)


def test_contract_catches_a_script_that_bypasses_the_protocol():
  def own_rule(result):  # a script deciding on the sign of the mean itself
    out = protocol.decide(FIXTURE_CLAIMS, result)
    d = FIXTURE_CLAIMS[0].compare.diffs(result)[0]
    return [out[0]._replace(verdict="held" if d.mean() > 0 else "refuted"), *out[1:]]

  failures = contract_failures(fixture_module(own_rule), fixture_record())
  assert any(f.startswith("claim 0") and "null" in f for f in failures)
  assert any(f.startswith("claim 0") and "control fails" in f for f in failures)


@pytest.mark.parametrize("dropped", ["_control", "guard"])
def test_contract_catches_a_dropped_control_or_guard(monkeypatch, dropped):
  if dropped == "_control":
    monkeypatch.setattr(protocol, "_control", lambda *a: None)
    case = "positive control fails"
  else:
    monkeypatch.setattr(protocol.Guard, "check", lambda self, record: None)
    case = "guard 0 at its bound"
  failures = contract_failures(fixture_module(), fixture_record())
  assert any(case in f for f in failures)


def _cheat_inconclusive(result):  # an interval that spans 0 and δ called held on D > 0
  out = protocol.decide(FIXTURE_CLAIMS, result)
  d = FIXTURE_CLAIMS[0].compare.diffs(result)[0]
  if out[0].verdict == "inconclusive" and d.mean() > 0:
    out[0] = out[0]._replace(verdict="held")
  return out


def _cheat_dirty(result):  # a dirty record decides
  clean = {**result, "provenance": {"git_dirty": False}}
  return protocol.decide(FIXTURE_CLAIMS, clean)


def _cheat_first_guard(result):  # only the first guard is checked
  specs = [FIXTURE_CLAIMS[0].__class__(**{**FIXTURE_CLAIMS[0].__dict__,
                                          "guards": FIXTURE_CLAIMS[0].guards[:1]}),
           *FIXTURE_CLAIMS[1:]]
  return protocol.decide(specs, result)


@pytest.mark.parametrize("cheat, case", [(_cheat_inconclusive, "uncertain"),
                                         (_cheat_dirty, "dirty tree"),
                                         (_cheat_first_guard, "guard 1 at its bound")])
def test_contract_catches_scripts_that_bend_one_rule(cheat, case):
  failures = contract_failures(fixture_module(cheat), fixture_record())
  assert any(f.startswith("claim 0") and case in f for f in failures), failures
