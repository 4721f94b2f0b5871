"""Experiment records and their provenance: writing ``results.json`` and ``summary.md``.

:func:`save_json` writes a result with :func:`provenance` (git commit, package versions,
device, command line), its curves downsampled (:func:`compact_results`) so every
``results.json`` stays under :data:`MAX_RESULTS_BYTES`; :func:`write_results` adds the
``summary.md``; :func:`run_experiment` is the run skeleton every experiment's ``main`` shares;
:func:`seed_runs` / :func:`clear_seed_runs` keep per-seed records so a killed run resumes.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Any

import jax
from tqdm.auto import tqdm

from experiments.cli import ExperimentCLI


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


def provenance(module: str, argv: list[str] | None = None, out: str | None = None) -> dict:
  """Where a result came from: git commit, package versions, device, command line.

  Args:
    module: the experiment module's name (``dipper`` for ``experiments.dipper``).
    argv: the arguments the experiment parsed (``None``: ``sys.argv[1:]``, as
      ``python -m`` passes them).
    out: the run's output folder. Its own files do not make the tree dirty (a run that
      re-records a committed result changes them before it writes ``results.json``), nor do
      the committed records under ``docs/results/`` (outputs, not code: ``run_all --update``
      re-records several methods in turn, and each must not count the ones before it).

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
  skip = ["--", ".", ":(exclude)docs/results"]
  if out is not None:
    rel = os.path.relpath(os.path.abspath(out), _ROOT)
    if rel != "." and not rel.startswith(os.pardir):
      skip.append(f":(exclude){rel}")
  status = _git("status", "--porcelain", "--untracked-files=no", *skip)
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
    result = {**result, "provenance": provenance(module, argv, os.path.dirname(path) or ".")}
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


def run_experiment(argv, cli: ExperimentCLI, name: str, run, plot, table, note,
                   after=None) -> dict:
  """The shape every experiment's ``main`` shares: parse, ``run(cfg, args) -> dict`` (merged
  into the result after ``scale`` and ``config``), wall time, machine, ``plot(result, out)
  -> figure names``, then ``results.json`` and ``summary.md`` with ``table(result)`` and
  ``note(result)`` (see :func:`write_results`), then ``after(result, args)`` if given (e.g.
  :func:`clear_seed_runs` once the results are written)."""
  args, scale, cfg = cli.parse(argv)
  os.makedirs(args.out, exist_ok=True)
  start = time.time()
  result = {"scale": scale, "config": cfg, **run(cfg, args)}
  result["wall_time_s"] = time.time() - start
  result["machine"] = machine()
  result["figures"] = plot(result, args.out)
  write_results(args.out, name, result, table(result), note(result), argv=argv)
  if after is not None:
    after(result, args)
  return result


def seed_runs(out: str, cfg: dict, run_seed, desc: str) -> list:
  """``[run_seed(seed) for seed in range(cfg["seeds"])]``, resumable per seed.

  Each finished seed's record is saved as ``out/seed<i>.json`` with the configuration, and a
  rerun with the same ``out`` and an equal configuration reuses it instead of running the seed
  again (a record of another configuration, or an unreadable one, is run again and
  overwritten; after changing the code, use a new ``out``). Records are written to a
  temporary file and renamed, so a run killed mid-write leaves no partial record. Every
  record is returned as its JSON round trip, resumed or not. For experiments whose seeds are
  separate programs; :func:`clear_seed_runs` removes the files once the results are written.
  """
  runs = []
  key = json.loads(dumps(cfg))
  for seed in tqdm(range(cfg["seeds"]), desc=desc, unit="seed"):
    path = os.path.join(out, f"seed{seed}.json")
    saved = None
    if os.path.exists(path):
      try:
        with open(path) as f:
          saved = json.load(f)
      except json.JSONDecodeError:
        saved = None
    if not isinstance(saved, dict) or saved.get("config") != key:
      saved = json.loads(dumps({"config": cfg, "run": run_seed(seed)}))
      with open(path + ".tmp", "w") as f:
        f.write(dumps(saved))
      os.replace(path + ".tmp", path)
    runs.append(saved["run"])
  return runs


def clear_seed_runs(out: str, seeds: int) -> None:
  """Removes the per-seed records :func:`seed_runs` saved (the run is complete)."""
  for seed in range(seeds):
    path = os.path.join(out, f"seed{seed}.json")
    if os.path.exists(path):
      os.remove(path)
