"""The text of the generated page regions: committed records, and how numbers read.

Each experiment module's ``page() -> {name: text}`` fills its page's generated regions
(``<!-- gen:<module>.<name> -->`` in ``docs/methods/<module>.md``, see
:mod:`experiments.docs`) from the committed record under ``docs/results/``, with these
helpers: :func:`load` / :func:`recorded` read a record, :func:`quick_and_full` renders a page
whose quick and full records read alike, :func:`claims_table` gives a record's verdicts
under the protocol, and the formatters (:func:`g`, :func:`f`, :func:`pm`, ...) are the one
place for how numbers and spreads read in the docs.

Spread over seeds follows the README's convention: ``a ± b`` is the mean and the sample
standard deviation (``ddof=1``), ``lo-hi`` the min-max over seeds.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable

import numpy as np

from experiments import methods, protocol
from experiments.reporting import markdown_table as table
from experiments.reporting import sample_std as std  # the house spread (jaxlab.core.stats)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")


@functools.cache
def recorded(*parts: str) -> dict | None:
  """:func:`load`, or ``None`` where that record is not committed (a full run not run yet)."""
  path = os.path.join(RESULTS, *parts)
  return load(*parts) if os.path.exists(path if path.endswith(".json")
                                        else os.path.join(path, "results.json")) else None


def not_recorded(module: str) -> str:
  """What a page says where the full run's record is missing."""
  return f"The full run (`python -m experiments.{module}`) is not recorded yet."


def claims_table(module: str, record: dict) -> str:
  """The method's verdicts on ``record`` under the protocol
  (:func:`experiments.protocol.method_decisions`) as a markdown table: claim (the primary one
  marked), measured, verdict with its reason."""
  decisions = protocol.method_decisions(methods.by_module(module), record)
  return table(["claim", "measured", "verdict"],
               [[_cell(d.claim + (" (primary)" if d.primary else "")), _cell(d.measured),
                 _cell(d.text)] for d in decisions])


def _cell(text: str) -> str:
  return text.replace("|", "\\|").replace("\n", " ")


def quick_and_full(module: str, report) -> dict[str, str]:
  """The ``quick_table`` and ``full`` regions of a page whose two records render alike:
  ``report(record) -> markdown``; the full region says so where no full run is committed."""
  full = recorded(module, "full")
  return {"quick_table": report(load(module, "quick")),
          "full": not_recorded(module) if full is None
                  else f"\nFull run (`docs/results/{module}/full/`): "
                       + report(full).lstrip("\n")}


LOADED: dict[str, dict] = {}  # every record the pages read: path -> its provenance


def load(*parts: str) -> dict:
  """``docs/results/<parts...>`` (``results.json`` appended to a folder); remembers the
  record's provenance in :data:`LOADED` (``experiments.docs --check`` refuses dirty ones)."""
  path = os.path.join(RESULTS, *parts)
  if not path.endswith(".json"):
    path = os.path.join(path, "results.json")
  with open(path) as f:
    record = json.load(f)
  LOADED[os.path.relpath(path, ROOT)] = record.get("provenance") or {}
  return record


def dirty_records() -> list[str]:
  """The records read so far that were made from a dirty tree (they decide nothing)."""
  return sorted(p for p, prov in LOADED.items() if prov.get("git_dirty") is True)


# ---------------------------------------------------------------------------
# Formatting: one place for how numbers and spreads read in the docs.


def g(x: float, digits: int = 3) -> str:
  """``x`` to ``digits`` significant digits, trailing zeros kept (``0.870``, ``1.3e-9``)."""
  if x is None or not np.isfinite(x):
    return "n/a"
  text = f"{x:.{digits}g}"
  if "e" in text:
    mant, exp = text.split("e")
    return f"{mant}e{int(exp)}"
  return f"{x:#.{digits}g}".rstrip(".")


def f(x: float, decimals: int = 2) -> str:
  """``x`` with a fixed number of decimals (``-0.00`` printed as ``0.00``)."""
  text = f"{x:.{decimals}f}"
  return text[1:] if re.fullmatch(r"-0\.?0*", text) else text


def thousands(x: float) -> str:
  """An integer with thousands separators (``4,507``)."""
  return f"{round(x):,}"


def seconds(x: float) -> str:
  """A wall time in seconds as the docs print it (``4,507 s``)."""
  return f"{thousands(x)} s"


def pct(x: float, decimals: int = 1) -> str:
  """A share in ``[0, 1]`` as a percentage (``37.6%``)."""
  return f"{100 * x:.{decimals}f}%"


def signed(x: float, decimals: int = 3) -> str:
  return ("+" if x >= 0 else "") + f(x, decimals)


def pm(values, fmt: Callable[[float], str] = f, std_fmt: Callable[[float], str] | None = None
       ) -> str:
  """``mean ± std`` (sample std, ``ddof=1``) of per-seed values."""
  x = np.asarray(values, np.float64).reshape(-1)
  s = std(x)
  text = fmt(float(x.mean()))
  return text if not np.isfinite(s) else f"{text} ± {(std_fmt or fmt)(s)}"


def minmax(values, fmt: Callable[[float], str] = f) -> str:
  """``min-max`` of per-seed values."""
  x = np.asarray(values, np.float64).reshape(-1)
  return f"{fmt(float(x.min()))}-{fmt(float(x.max()))}"


def span(values, fmt: Callable[[float], str] = f, sep: str = "-") -> str:
  """``lo-hi`` of several measured values (a range over settings, not seeds)."""
  x = [float(v) for v in values]
  lo, hi = fmt(min(x)), fmt(max(x))
  return lo if lo == hi else f"{lo}{sep}{hi}"
