"""The docs' measured numbers are generated from the committed results (experiments.docs)."""

import glob
import os
import re

from experiments import docs

METHODS = ("quant_optim", "matching_incremental", "flow_actor_critic", "dipper", "fractal_gd",
           "trec", "alpha_dpo", "recouple", "ttm", "lm_toolkit", "adaback",
           "expert_divergence", "cocomix", "sstoken",
           "sfdd", "cascadia", "g_nll", "freekv", "planned_diffusion", "fastflow",
           "distill_kac", "lumos", "redacbench", "virf", "ata", "ttom", "tru",
           "asguard", "dl4nd", "egoworld", "tvi", "care", "greedy", "satdreamer", "vprl")


def test_generated_regions_match_the_committed_results():
  stale = docs.stale()
  listing = "\n".join(f"{path}: gen:{key}: committed {old[:80]!r}, generated {new[:80]!r}"
                      for path, regions in stale.items() for key, old, new in regions)
  assert not stale, "run `python -m experiments.docs`:\n" + listing


def test_every_method_has_a_page_and_the_readme_links_it():
  paths = glob.glob(os.path.join(docs.ROOT, "docs", "methods", "*.md"))
  pages = {os.path.basename(p)[:-3] for p in paths}
  assert pages == set(METHODS)
  readme = open(os.path.join(docs.ROOT, "README.md")).read()
  for method in METHODS:
    assert f"(docs/methods/{method}.md)" in readme


def test_no_hand_typed_numbers_in_method_tables():
  """A table row with a digit outside a generated region is a number typed by hand."""
  offenders = []
  for path in docs.doc_files()[1:]:
    text = docs.GEN.sub("", open(path).read())
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code examples are not tables
    offenders += [f"{os.path.basename(path)}: {line[:100]}" for line in text.splitlines()
                  if line.startswith("|") and re.search(r"\d", line)]
  assert not offenders, "\n".join(offenders)


def test_render_refreshes_and_reports_stale_regions(monkeypatch):
  monkeypatch.setitem(docs.SOURCES, "fake", lambda: {"x": "1.23", "t": "| a |\n|---|\n| 4 |"})
  docs.values.cache_clear()
  try:
    text = ("value <!-- gen:fake.x -->9.99<!-- /gen --> and\n"
            "<!-- gen:fake.t -->\n| a |\n|---|\n| 4 |\n<!-- /gen -->\n")
    new, changed = docs.render(text)
    assert "<!-- gen:fake.x -->1.23<!-- /gen -->" in new
    assert [key for key, _, _ in changed] == ["fake.x"]  # the table was already current
    assert docs.render(new)[1] == []
  finally:
    docs.values.cache_clear()


def test_spread_is_mean_and_sample_std():
  assert docs.pm([1.0, 2.0, 3.0], lambda x: f"{x:.1f}") == "2.0 ± 1.0"  # ddof=1
  assert docs.pm([0.5], lambda x: f"{x:.1f}") == "0.5"  # one seed: no spread
  assert docs.minmax([3.0, 1.0, 2.0], lambda x: f"{x:.0f}") == "1-3"


def test_committed_results_stay_under_1mb_with_provenance():
  paths = glob.glob(os.path.join(docs.RESULTS, "**", "results.json"), recursive=True)
  assert len(paths) >= 9
  for path in paths:
    assert os.path.getsize(path) < 1_000_000, path
    with open(path) as fh:
      assert '"provenance"' in fh.read(), path
