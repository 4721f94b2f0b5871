"""Helpers every experiment script shares: scale selection, writing results (with
provenance, curves downsampled to keep ``results.json`` small), the report rows
``run_all`` collects, and sharding seeds over devices."""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import re
import shlex
import subprocess
import sys
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np


def scale_config(args: argparse.Namespace, configs: dict[str, dict]) -> tuple[str, dict]:
  """``(scale, config)`` from ``--smoke`` / ``--quick`` / full and an optional ``--seeds``."""
  scale = "smoke" if getattr(args, "smoke", False) else "quick" if args.quick else "full"
  cfg = dict(configs[scale])
  if getattr(args, "seeds", None) is not None:
    if args.seeds < 1:
      raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    cfg["seeds"] = args.seeds
  return scale, cfg


def machine() -> dict[str, str]:
  """The backend and JAX version an experiment ran on (for its ``results.json``)."""
  return {"backend": jax.default_backend(), "jax": jax.__version__}


MAX_RESULTS_BYTES = 900_000  # every results.json stays under 1 MB (issue 15)
CURVE_POINTS = (512, 256, 128, 64, 32, 16)  # curve lengths tried, longest first
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _git(*args: str) -> str | None:
  try:
    return subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()
  except Exception:  # noqa: BLE001 (no git, or not a checkout: provenance says unknown)
    return None


def provenance(module: str, argv: list[str] | None = None) -> dict:
  """Where a result came from: git commit, package versions, device, command line.

  Args:
    module: the experiment module's name (``dipper`` for ``experiments.dipper``).
    argv: the arguments the experiment parsed (``None``: ``sys.argv[1:]``, as
      ``python -m`` passes them).

  Returns:
    ``{"git_commit", "git_dirty", "versions", "backend", "device", "command"}``;
    ``git_commit`` is ``None`` outside a git checkout.
  """
  import jax  # noqa: PLC0415 (already imported by every experiment; keeps this cheap)

  argv = list(sys.argv[1:] if argv is None else argv)
  versions = {}
  for pkg in ("jax", "jaxlib", "flax", "optax", "numpy"):
    try:
      versions[pkg] = importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
      versions[pkg] = None
  devices = jax.devices()
  status = _git("status", "--porcelain", "--untracked-files=no")
  return {"git_commit": _git("rev-parse", "HEAD"),
          "git_dirty": None if status is None else bool(status),
          "versions": versions, "backend": jax.default_backend(),
          "device": f"{len(devices)} x {devices[0].device_kind}",
          "command": shlex.join(["python", "-m", f"experiments.{module}", *argv])}


def _is_number(x: Any) -> bool:
  return isinstance(x, (int, float)) and not isinstance(x, bool) or x is None


def _is_curve(x: Any, points: int) -> bool:
  """A list longer than ``points`` of numbers, or of equal-length rows of numbers."""
  if not isinstance(x, list) or len(x) <= points:
    return False
  if all(_is_number(v) for v in x):
    return True
  return (all(isinstance(v, list) and all(_is_number(u) for u in v) for v in x)
          and len({len(v) for v in x}) == 1)


def _round(x: Any, digits: int = 6) -> Any:
  if isinstance(x, list):
    return [_round(v, digits) for v in x]
  if isinstance(x, float) and math.isfinite(x):
    return float(f"{x:.{digits}g}")
  return x


def downsample_curves(tree: Any, points: int) -> Any:
  """``tree`` with every curve longer than ``points`` cut to ``points`` samples.

  A curve is a list of numbers, or of equal-length rows of numbers (e.g. one row
  of per-seed values per iteration), longer than ``points``. It keeps ``points``
  evenly spaced entries, the first and the last included, each rounded to 6
  significant digits. Everything else (summaries, per-seed finals, configs) is
  kept as is, so report code that reads summaries gives the same numbers; the
  figures drawn from curves get fewer points.
  """
  if _is_curve(tree, points):
    idx = sorted({round(i * (len(tree) - 1) / (points - 1)) for i in range(points)})
    return [_round(tree[i]) for i in idx]
  if isinstance(tree, dict):
    return {k: downsample_curves(v, points) for k, v in tree.items()}
  if isinstance(tree, list):
    return [downsample_curves(v, points) for v in tree]
  return tree


_LEAF_LIST = re.compile(r"\[(?:\s*(?:-?[0-9.eE+-]+|NaN|-?Infinity|null|true|false),?)+\s*\]")


def dumps(result: Any, default: Any = str) -> str:
  """JSON with ``indent=1`` but each list of plain numbers on one line."""
  text = json.dumps(result, indent=1, default=default)
  return _LEAF_LIST.sub(lambda m: re.sub(r"\s+", "", m.group(0)).replace(",", ", "), text)


def compact_results(result: dict, max_bytes: int = MAX_RESULTS_BYTES,
                    default: Any = str) -> dict:
  """``result`` with its curves downsampled until its JSON fits in ``max_bytes``.

  Tries the curve lengths of ``CURVE_POINTS`` from the longest; a result that
  already fits is returned unchanged. Records the length used under
  ``result["downsampled"]``.
  """
  result = json.loads(dumps(result, default))  # plain types (numpy scalars, tuples) first
  if len(dumps(result)) <= max_bytes:
    return result
  for points in CURVE_POINTS:
    small = downsample_curves(result, points)
    if len(dumps(small)) <= max_bytes:
      break
  small["downsampled"] = {"curve_points": points, "rule": (
      "curves (lists longer than curve_points) keep curve_points evenly spaced entries, "
      "first and last included, rounded to 6 significant digits")}
  return small


def save_json(path: str, result: dict, module: str | None = None,
              argv: list[str] | None = None, default: Any = str) -> dict:
  """Writes ``result`` to ``path``, downsampled to fit 1 MB, with its provenance.

  Args:
    path: the ``results.json`` to write.
    result: the experiment's results (plain JSON-able values).
    module: the experiment module's name; when given, ``result["provenance"]``
      is set from :func:`provenance` (unless the result already has one).
    argv: the arguments the experiment parsed (see :func:`provenance`).
    default: how ``json`` writes values it cannot (``str``).

  Returns:
    What was written.
  """
  if module is not None and "provenance" not in result:
    result = {**result, "provenance": provenance(module, argv)}
  result = compact_results(result, default=default)
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  with open(path, "w") as f:
    f.write(dumps(result) + "\n")
  return result


def write_results(out: str, name: str, result: dict, table: str, note: str = "",
                  argv: list[str] | None = None, new_run: bool = True) -> None:
  """Writes ``results.json`` (see :func:`save_json`) and ``summary.md`` (title, wall time,
  note, table); prints the table.

  ``name`` is the experiment module's name; ``new_run=False`` (a report rebuilt from
  saved results) records no provenance, since the run is not this process's.
  """
  save_json(os.path.join(out, "results.json"), result, name if new_run else None, argv)
  with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(f"# {name} ({result['scale']}), {result['wall_time_s']:.0f} s\n\n"
            + (note + "\n\n" if note else "") + table + "\n")
  print(table)
  print(f"\nwall time {result['wall_time_s']:.1f} s; results in {out}")


def sample_std(values) -> float:
  """Sample standard deviation (``ddof=1``) over seeds; NaN for fewer than two values.

  The README's convention for every "±" in tables and reports (mean ± sample std).
  """
  x = np.asarray(values, np.float64).reshape(-1)
  return float(np.std(x, ddof=1)) if x.size > 1 else float("nan")


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


class Ratio(NamedTuple):
  """One benchmark ratio for ``run_all``'s report: ours vs the anchor, same run."""

  name: str  # what is compared, e.g. "quantized_adam step vs optax.adam"
  ratio: float  # ours / anchor
  note: str = ""
  higher_is_better: bool = False  # False: a time ratio (> 1 slower); True: a throughput ratio


def seed_mesh(axis: str = "seeds") -> jax.sharding.Mesh:
  """A 1-D mesh over every device (all hosts after ``jax.distributed.initialize()``)."""
  return jax.sharding.Mesh(np.asarray(jax.devices()), (axis,))


def shard_seeds(tree: Any, axis: str = "seeds") -> Any:
  """Places the leading (seed or batch) axis of each array leaf across all devices.

  The computation that consumes the result (a jitted, vmapped-over-seeds function)
  is then partitioned by XLA so each device runs its share of the seeds. Leaves
  whose leading size does not divide by the device count, and scalars, are
  replicated instead, with a warning: correct, just not parallel (pick ``--seeds``
  as a multiple of the device count). On one device this is a plain placement
  and changes nothing. Pass only per-seed leaves: a shared array whose first
  dimension happens to divide by the device count would be split too.

  Example::

    keys = shard_seeds(jax.random.split(jax.random.key(0), num_seeds))
    out = jax.jit(jax.vmap(train_one_seed))(keys)   # seeds split over devices

  Multi-host: after ``jax.distributed.initialize()`` the mesh spans every host;
  outputs then span devices other processes own and must be gathered
  (``jax.experimental.multihost_utils.process_allgather``) before ``np.asarray``,
  which the experiment scripts do not do yet.
  """
  mesh = seed_mesh(axis)
  n = mesh.size
  split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  uneven = []

  def place(x):
    if not hasattr(x, "shape"):
      return x
    even = x.ndim >= 1 and x.shape[0] % n == 0
    if not even and x.ndim >= 1 and n > 1:
      uneven.append(x.shape[0])
    return jax.device_put(x, split if even else replicated)

  placed = jax.tree.map(place, tree)
  if uneven:
    warnings.warn(f"shard_seeds: leading sizes {sorted(set(uneven))} do not divide by the "
                  f"{n} devices, so those inputs are replicated (each device runs all of "
                  f"them); use a multiple of {n} seeds to split them", stacklevel=2)
  return placed
