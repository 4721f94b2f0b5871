"""Reporting helpers: spreads over seeds, the claims and ratios rows ``run_all`` collects,
markdown tables and figures.

Every "±" in a table is :func:`pm` (mean ± sample standard deviation, :func:`sample_std`).
An experiment's ``claims(result)`` returns :class:`Claim` rows (checked by
:func:`check_claims`) and a benchmark's ``ratios(result)`` :class:`Ratio` rows;
:func:`markdown_table`, :func:`claims_markdown` and :func:`table_and_claims` write the
summaries, :func:`save_figure` and :func:`save_digit_grid` the figures.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from jaxlab.core.stats import spread


def sample_std(values) -> float:
  """Sample standard deviation (``ddof=1``) over seeds; NaN for fewer than two values.

  The README's convention for every "±" in tables and reports (mean ± sample std).
  """
  return spread(values).std


def pm(values, fmt: str = ".3f", std_fmt: str | None = None, sign: bool = False) -> str:
  """``"mean ± sample std"`` of per-seed ``values`` (only the mean for a single seed)."""
  x = np.asarray(values, np.float64).reshape(-1)
  mean = f"{x.mean():{'+' if sign else ''}{fmt}}"
  s = sample_std(x)
  return mean if not np.isfinite(s) else f"{mean} ± {s:{std_fmt or fmt}}"


class Claim(NamedTuple):
  """One row of ``run_all``'s report: a paper's claim and what we measured of it.

  ``held`` is computed from the measured numbers (``True`` / ``False``), or ``None``
  where this scale cannot test the claim.
  """

  claim: str  # the paper's claim in one sentence
  measured: str  # our numbers, with their spread across seeds
  held: bool | None


def check_claims(rows: list) -> list[Claim]:
  """``rows`` if each is a :class:`Claim` with text and a ``bool``/``None`` verdict.

  ``run_all`` calls it on every ``claims()`` result, so a malformed row is reported
  as a claims error instead of a wrong table; tests call it on recorded results.

  Raises:
    TypeError: naming the first row that is not a Claim or whose ``held`` is not
      ``True``/``False``/``None``.
    ValueError: naming the first row with an empty ``claim`` or ``measured``.
  """
  for i, row in enumerate(rows):
    if not isinstance(row, Claim):
      raise TypeError(f"claims row {i} must be a Claim, got {type(row).__name__}")
    if not (row.held is None or isinstance(row.held, bool)):
      raise TypeError(f"claims row {i}: held must be True, False or None, got {row.held!r}")
    if not (isinstance(row.claim, str) and row.claim and isinstance(row.measured, str)
            and row.measured):
      raise ValueError(f"claims row {i}: claim and measured must be non-empty strings")
  return list(rows)


def save_figure(fig, out: str, name: str, dpi: int = 120) -> str:
  """Lays out ``fig``, writes it to ``out/name`` and closes it; returns ``name``."""
  import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib only where figures are drawn)

  fig.tight_layout()
  fig.savefig(os.path.join(out, name), dpi=dpi)
  plt.close(fig)
  return name


def save_digit_grid(rows: dict, out: str, name: str, title: str, *, height: float = 0.9,
                    shape: tuple[int, int] = (8, 8)) -> str:
  """One row of 8 x 8 digit images per entry of ``rows`` (label -> flat 64-pixel images in
  ``[-1, 1]``, clipped), labelled on the left, saved as ``out/name`` (returns ``name``).
  ``shape``: the images' height and width (default 8 x 8 digits; TTOM's canvases 24 x 24)."""
  import matplotlib.pyplot as plt  # noqa: PLC0415 (matplotlib only where figures are drawn)

  cols = max((len(xs) for xs in rows.values()), default=1)
  fig, axes = plt.subplots(len(rows), cols, figsize=(8, height * len(rows)), squeeze=False)
  for i, (label, xs) in enumerate(rows.items()):
    for j, x in enumerate(xs):
      axes[i, j].imshow(np.clip(np.reshape(x, shape), -1, 1), cmap="gray_r", vmin=-1, vmax=1)
      axes[i, j].set_xticks([])
      axes[i, j].set_yticks([])
    axes[i, 0].set_ylabel(label, fontsize=6, rotation=0, ha="right", va="center")
  fig.suptitle(title, fontsize=8)
  return save_figure(fig, out, name)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  """A markdown table: ``header`` and one line per row (cells through ``str``)."""
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
  return "\n".join(lines)


def table_and_claims(header: Sequence[str], rows: Sequence[Sequence[Any]], claims: list) -> str:
  """A summary's body: the results table, then the claims table (:func:`claims_markdown`)."""
  return markdown_table(header, rows) + "\n\n" + claims_markdown(claims)


def claims_markdown(rows: list, verdict: dict | None = None) -> str:
  """``claims()`` rows as a markdown table (claim, measured, held), checked by
  :func:`check_claims`; ``verdict`` maps ``True``/``False``/``None`` to the held cell
  (default: the value itself, as the summaries print it)."""
  cell = (lambda held: str(held)) if verdict is None else verdict.__getitem__  # noqa: E731
  return markdown_table(["claim", "measured", "held"],
                        [[c.claim, c.measured, cell(c.held)] for c in check_claims(rows)])


class Ratio(NamedTuple):
  """One benchmark ratio for ``run_all``'s report: ours vs the anchor, same run."""

  name: str  # what is compared, e.g. "quantized_adam step vs optax.adam"
  ratio: float  # ours / anchor
  note: str = ""
  higher_is_better: bool = False  # False: a time ratio (> 1 slower); True: a throughput ratio
