"""Every measured number in the README and ``docs/methods/`` comes from a results file.

    python -m experiments.docs            # rewrite the generated regions in place
    python -m experiments.docs --check    # exit 1 listing regions that differ

A generated region is ``<!-- gen:KEY -->...<!-- /gen -->`` in ``README.md`` or
``docs/methods/*.md``: a whole table (the region spans lines) or one number in
prose (inline). ``KEY`` is ``<source>.<name>``: ``readme`` (this module: the methods table
from the registry and the verdicts table), or a method (its experiment module's ``page()``,
next to its ``claims()``, plus the ``evidence`` and ``verdicts`` regions every method page
has, from the protocol), or another page's module (:func:`experiments.methods.page_sources`).
Each reads the committed record (``docs/results/<method>/<scale>/results.json``, the run_all
report, the benchmarks) through :mod:`experiments.pages`. So a new run, committed under
``docs/results/``, changes the docs by running this module, and
``tests/experiments/test_docs.py`` fails while they disagree. ``--check`` also refuses every
record the docs read that was made from a dirty tree (``provenance.git_dirty``): it decides
nothing, so re-record it from a clean checkout.
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
import re
import sys
from collections.abc import Callable

from experiments import methods, pages, protocol
from experiments.cli import ExperimentCLI
from experiments.pages import ROOT, claims_table, load, recorded, seconds, table

GEN = re.compile(r"<!-- gen:(?P<key>[\w./-]+) -->(?P<body>.*?)<!-- /gen -->", re.S)


def doc_files() -> list[str]:
  """The files whose generated regions this module owns."""
  return [os.path.join(ROOT, "README.md"),
          *sorted(glob.glob(os.path.join(ROOT, "docs", "methods", "*.md")))]


# ---------------------------------------------------------------------------
# The README's own numbers: the run_all report.


def _status(method) -> str:
  return ("ported to the protocol" if method.ported
          else f"test bed under repair (issue {method.repair_issue})")


def methods_table() -> str:
  """The README's methods table, from the registry (:mod:`experiments.methods`)."""
  def row(title, page, summary, library, status, citation):
    link = f"[{title}]({page})" + (f" {summary}" if summary.startswith("(") else
                                   f": {summary}" if summary else "")
    return [link, ", ".join(f"`{m}`" for m in library), status, citation]

  rows = [row(m.title or m.name, m.page, m.summary, m.library, _status(m), m.citation)
          for m in methods.METHODS]
  rows += [row(c.name, c.page, c.summary, c.library, "shared component", "-")
           for c in methods.COMPONENTS]
  return table(["method", "module", "evidence", "paper"], rows)


def readme() -> dict[str, str]:
  """The README's tables: the methods (registry) and the verdicts of every method's primary
  claim under the protocol, on its committed full record (quick run times from run_all)."""
  report = load("run_all", "quick", "report.json")
  quick = {e["experiment"]["module"]: e for e in report["entries"]}
  rows, primaries = [], []
  for m in methods.METHODS:
    e = quick[m.module]
    wall = e["experiment"]["wall_time_s"] + e.get("bench", {}).get("wall_time_s", 0.0)
    ratios = len(e.get("ratios") or []) if "bench" in e else None
    record = recorded(m.module, "full")
    if record is None:
      primary, tally = "cannot tell (no full run recorded)", "-"
      primaries.append("cannot tell")
    else:
      decisions = protocol.method_decisions(m, record)
      primary = decisions[0].verdict + (" (under repair)" if not m.ported else "")
      primaries.append(decisions[0].verdict)
      tally = " / ".join(str(n) for n in protocol.counts(decisions).values())
    rows.append([m.name, seconds(wall), primary, tally, "-" if ratios is None else str(ratios)])
  headline = protocol.counts([protocol.Decision("", "", v, "") for v in primaries])
  return {
      "run_all_minutes": f"{report['wall_time_s'] / 60:.1f}",
      "run_all_seconds": seconds(report["wall_time_s"]),
      "methods_table": methods_table(),
      "primary_counts": ", ".join(f"{n} {v}" for v, n in headline.items()),
      "ported": f"{sum(m.ported for m in methods.METHODS)} of {len(methods.METHODS)}",
      "run_all_table": table(["method", "quick: wall time (with benchmark)",
                              "primary claim (full run)",
                              "full run: held / refuted / inconclusive / cannot tell",
                              "quick: benchmark ratios"], rows),
  }


def evidence(module: str, tables_above: bool = False) -> dict[str, str]:
  """The two regions every method page has beside its own: ``evidence`` (one line under the
  title: ported or under repair, and the primary claim's verdict on the full run) and
  ``verdicts`` (every claim's verdict under the protocol, on the full run if one is committed,
  else on the quick run; where the page's own regions already hold those tables,
  ``tables_above``, only the counts)."""
  m = methods.by_module(module)
  full = recorded(module, "full")
  record, which = (full, "full") if full is not None else (load(module, "quick"), "quick")
  decisions = protocol.method_decisions(m, record)
  if m.ported:
    status = (f"decided under the verdict protocol; primary claim on the {which} run: "
              f"**{decisions[0].text}**.")
    intro = (f"The {which} run (`docs/results/{module}/{which}/`), decided by "
             "`experiments/protocol.py` (paired differences, a 95% interval, the margin, "
             "controls and guards; see the README's \"How a claim is decided\"):")
  else:
    status = (f"test bed under repair (issue {m.repair_issue}): every claim reads \"cannot "
              "tell\" under the verdict protocol until this experiment is ported; the results "
              "below are what the script measured, and its own rule decides nothing.")
    intro = (f"The {which} run (`docs/results/{module}/{which}/`) under `experiments/protocol.py`. "
             f"The test bed is under repair (issue {m.repair_issue}), so every claim reads "
             "\"cannot tell\"; the reason keeps what the script's own rule said:")
  if tables_above and not m.ported:
    tally = ", ".join(f"{n} {v}" for v, n in protocol.counts(decisions).items())
    return {"evidence": status,
            "verdicts": f"The {which} run: primary claim {decisions[0].verdict}; all claims: "
                        f"{tally} (the tables above give each claim's measurement and reason)."}
  text = intro + "\n\n" + claims_table(module, record)
  if m.ported:
    text += "\n\n" + "\n".join(f"- {protocol.describe(s)}" for s in m.experiment().CLAIMS)
  return {"evidence": status, "verdicts": text}


def sources() -> dict[str, Callable[[], dict[str, str]]]:
  """Generated-region key prefix -> the function giving its values: the README's, and each
  module's ``page()`` (:func:`experiments.methods.page_sources`), with :func:`evidence` added
  for the methods."""
  out: dict[str, Callable[[], dict[str, str]]] = {"readme": readme}
  modules = {m.module for m in methods.METHODS}
  for key, module in methods.page_sources().items():
    page = importlib.import_module(f"experiments.{module}").page
    out[key] = (functools.partial(_method_values, page, key) if key in modules else page)
  return out


def _method_values(page: Callable[[], dict[str, str]], module: str) -> dict[str, str]:
  vals = page()
  shown = any("| claim | measured | verdict |" in v for v in vals.values())
  return {**vals, **evidence(module, tables_above=shown)}


@functools.cache
def values(source: str) -> dict[str, str]:
  known = sources()
  if source not in known:
    raise KeyError(f"no source {source!r} for generated docs (known: {sorted(known)})")
  return known[source]()


def value(key: str) -> str:
  """The text of generated region ``KEY`` (``<source>.<name>``)."""
  source, _, name = key.partition(".")
  vals = values(source)
  if name not in vals:
    raise KeyError(f"generated docs: {source!r} has no value {name!r}")
  return vals[name]


def render(text: str) -> tuple[str, list[tuple[str, str, str]]]:
  """``text`` with every generated region refreshed, and the regions that changed."""
  changed = []

  def fill(m: re.Match) -> str:
    new = value(m.group("key"))
    body = f"\n{new}\n" if "\n" in new or m.group("body").startswith("\n") else new
    if body != m.group("body"):
      changed.append((m.group("key"), m.group("body").strip(), new))
    return f"<!-- gen:{m.group('key')} -->{body}<!-- /gen -->"

  return GEN.sub(fill, text), changed


def stale() -> dict[str, list[tuple[str, str, str]]]:
  """``{file: [(key, committed, generated), ...]}`` for regions that are out of date."""
  out = {}
  for path in doc_files():
    with open(path) as fh:
      _, changed = render(fh.read())
    if changed:
      out[os.path.relpath(path, ROOT)] = changed
  return out


CONFIGS = {"full": dict(check=False)}


def cli() -> ExperimentCLI:
  """The command line (the same mechanism as the experiments'): ``--check``."""
  return ExperimentCLI(__doc__, CONFIGS,
                       helps={"check": "write nothing; exit 1 listing the regions that differ"})


def main(argv: list[str] | None = None) -> int:
  _, _, cfg = cli().parse(argv)
  if cfg["check"]:
    diff = stale()
    for path, regions in diff.items():
      for key, old, new in regions:
        print(f"{path}: gen:{key}\n  committed: {old[:200]!r}\n  generated: {new[:200]!r}")
    dirty = pages.dirty_records()
    for path in dirty:
      print(f"{path}: made from a dirty tree (provenance.git_dirty); it decides nothing: "
            "re-record it from a clean checkout")
    print("generated docs are up to date" if not diff
          else f"{sum(map(len, diff.values()))} generated regions differ; run "
               "`python -m experiments.docs`")
    return 1 if diff or dirty else 0
  for path in doc_files():
    with open(path) as fh:
      text, changed = render(fh.read())
    if changed:
      with open(path, "w") as fh:
        fh.write(text)
      print(f"{os.path.relpath(path, ROOT)}: {len(changed)} regions updated")
  return 0


if __name__ == "__main__":
  sys.exit(main())
