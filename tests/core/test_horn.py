"""Forward chaining against closures known by hand and against graph reachability (scipy)."""

import numpy as np
import pytest
import scipy.sparse.csgraph as csgraph

from jaxlab.core import horn
from jaxlab.core.horn import Derivation, Rule

PATH = [Rule("base", ("path", "?x", "?y"), (("edge", "?x", "?y"),)),
        Rule("step", ("path", "?x", "?z"), (("path", "?x", "?y"), ("edge", "?y", "?z")))]


def test_hand_built_closure_and_proofs():
  rules = [Rule("R1", ("hazard", "?f"), (("on", "?f", "?s"), ("stove", "?s"), ("active", "?s")),
                info={"danger": 8}),
           Rule("R2", ("active", "?s"), (("switched_on", "?s"),))]
  facts = [("on", "bread", "hob"), ("stove", "hob"), ("switched_on", "hob"),
           ("on", "pan", "table")]
  c = horn.forward_chain(facts, rules)
  assert c.derived == {("active", "hob"), ("hazard", "bread")}
  assert c.proof[("active", "hob")] == Derivation("R2", (("switched_on", "hob"),))
  assert c.proof[("hazard", "bread")] == Derivation(
      "R1", (("on", "bread", "hob"), ("stove", "hob"), ("active", "hob")))
  assert c.rounds == 3  # round 3 finds nothing new
  chain = horn.explain(c, ("hazard", "bread"))
  assert [f for f, _ in chain] == [("active", "hob"), ("hazard", "bread")]
  assert horn.explain(c, ("stove", "hob")) == []  # a base fact needs no derivation
  assert horn.entails(facts, rules, ("hazard", "bread"))
  assert not horn.entails(facts, rules, ("hazard", "pan"))


def test_repeated_variable_and_constants_in_rules():
  rules = [Rule("self", ("loop", "?x"), (("edge", "?x", "?x"),)),
           Rule("to_a", ("reaches_a", "?x"), (("edge", "?x", "a"),))]
  c = horn.forward_chain([("edge", "a", "a"), ("edge", "b", "a"), ("edge", "b", "c")], rules)
  assert c.derived == {("loop", "a"), ("reaches_a", "a"), ("reaches_a", "b")}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_path_closure_equals_graph_reachability(seed):
  rng = np.random.default_rng(seed)
  n = 12
  adj = rng.random((n, n)) < 0.12
  edges = [("edge", f"v{i}", f"v{j}") for i, j in zip(*np.nonzero(adj), strict=True)]
  c = horn.forward_chain(edges, PATH)
  # reference: k reachable from i by >= 1 edges iff some edge i -> j has j = k or j ~> k
  dist = csgraph.shortest_path(adj.astype(float), unweighted=True)  # dist[j, j] = 0
  reach = (adj.astype(int) @ np.isfinite(dist).astype(int)) > 0
  want = {("path", f"v{i}", f"v{j}") for i, j in zip(*np.nonzero(reach), strict=True)}
  assert {f for f in c.facts if f[0] == "path"} == want
  # every recorded proof is a valid rule application whose premises are in the closure
  by_name = {r.name: r for r in PATH}
  for fact, d in c.proof.items():
    ms = horn.matches(by_name[d.rule].body, d.premises)
    assert any(horn.substitute(by_name[d.rule].head, s) == fact for s, _ in ms)
    assert set(d.premises) <= c.facts


def test_semi_naive_equals_naive_fixpoint():
  rng = np.random.default_rng(3)
  edges = [("edge", f"v{i}", f"v{j}") for i, j in rng.integers(0, 9, (20, 2))]
  naive = set(edges)
  while True:  # naive T operator to its fixpoint
    new = {horn.substitute(r.head, s) for r in PATH for s, _ in horn.matches(r.body, naive)}
    if new <= naive:
      break
    naive |= new
  assert horn.forward_chain(edges, PATH).facts == naive


def test_max_rounds_truncates():
  chain = [("edge", f"v{i}", f"v{i + 1}") for i in range(6)]
  full = horn.forward_chain(chain, PATH)
  part = horn.forward_chain(chain, PATH, max_rounds=2)
  assert part.facts < full.facts and ("path", "v0", "v2") in part.facts
  assert ("path", "v0", "v6") not in part.facts


def test_bad_input():
  with pytest.raises(ValueError, match="range-restricted"):
    Rule("R", ("p", "?y"), (("q", "?x"),))
  with pytest.raises(ValueError, match="body must be a non-empty"):
    Rule("R", ("p", "a"), ())
  with pytest.raises(ValueError, match="must be ground"):
    horn.forward_chain([("edge", "?x", "b")], PATH)
  with pytest.raises(TypeError, match="tuple of non-empty strings"):
    horn.forward_chain([["edge", "a", "b"]], PATH)
  with pytest.raises(TypeError, match="rules must hold Rule"):
    horn.forward_chain([], ["not a rule"])
  with pytest.raises(ValueError, match="max_rounds"):
    horn.forward_chain([], PATH, max_rounds=-1)
  with pytest.raises(ValueError, match="not entailed"):
    horn.explain(horn.forward_chain([], PATH), ("path", "a", "b"))
