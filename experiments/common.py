"""Helpers every experiment script shares: the command line generated from the
configuration, writing results (with provenance, curves downsampled to keep
``results.json`` small), the report rows ``run_all`` collects, and sharding seeds
over devices."""

from __future__ import annotations

import argparse
import ast
import collections
import copy
import dataclasses
import functools
import importlib.metadata
import json
import math
import os
import re
import shlex
import subprocess
import sys
import time
import types as types_module
import typing
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxlab.core.stats import spread

SCALES = ("smoke", "quick", "full")


class ExperimentCLI:
  """The command line of an experiment script, generated from its configuration.

  ``configs`` maps a scale (``"full"``, and optionally ``"quick"`` and ``"smoke"``) to that
  scale's configuration dict. The CLI holds a frozen dataclass, :attr:`config_class`, whose
  fields are the configuration keys (the union over scales), typed from the values (or from
  ``types``) with the full scale's values as defaults, and an ``argparse`` parser with:

  * ``--quick`` / ``--smoke`` (when those scales exist; ``--smoke`` is the tests' setting and
    hidden from ``--help``) selecting the scale whose values are the defaults;
  * ``--out`` (when ``out`` is given);
  * ``--<field>`` (also spelled with dashes) for every field, overriding the scale's value.
    Its help shows the full and the quick default. Values parse by the field's type: numbers
    and strings as such; a bool as ``--x`` / ``--no-x``; a list or tuple of numbers or strings
    as several values or comma-separated (``--horizons 250 500`` or ``--horizons 250,500``);
    anything else (nested tuples, dicts) as a Python literal, where a dict is merged into the
    scale's dict (``--tasks "{'mixture': {'lr': 0.01}}"`` changes one entry).

  Scripts add their own flags (``--report-only``, selections such as ``--arms``) to
  :attr:`parser` and read the configuration with :meth:`parse`, whose dict keeps the shape of
  ``configs[scale]`` (what ``results.json`` records).

  Example::

    CONFIGS = {"full": dict(seeds=5, steps=2000), "quick": dict(seeds=3, steps=600)}

    def cli() -> ExperimentCLI:
      return ExperimentCLI(__doc__, CONFIGS, out="results/demo")

    def main(argv=None):
      args, scale, cfg = cli().parse(argv)   # `--quick --steps 100`: seeds 3, steps 100

  Args:
    doc: the script's docstring; its first line is the description.
    configs: scale -> configuration dict; ``"full"`` is required.
    out: default output folder (``None``: no ``--out`` flag).
    quick_help: help text of ``--quick`` (what the quick scale costs).
    helps: field -> what the field means, shown before the defaults.
    types: field -> type annotation where the values do not tell it (``int | None`` for a
      field that defaults to ``None``, ``tuple[str, ...]``); ``None`` defaults otherwise
      parse as literals.
    choices: field -> allowed values (for scalar fields and for each element of a sequence).
    flags: field -> flag name where the field's own name is taken by a script flag.
    resumable: add ``--checkpoint-dir`` (orbax checkpoints of the long loops; rerunning with
      the same folder resumes where the run stopped).
  """

  def __init__(self, doc: str | None, configs: dict[str, dict], *, out: str | None = None,
               quick_help: str | None = None, helps: dict[str, str] | None = None,
               types: dict[str, Any] | None = None,
               choices: dict[str, Sequence[Any]] | None = None,
               flags: dict[str, str] | None = None, resumable: bool = False):
    if "full" not in configs or set(configs) - set(SCALES):
      raise ValueError(f"configs must have a 'full' scale and only scales {SCALES}, got "
                       f"{list(configs)}")
    self.configs = configs
    helps, types, choices, flags = helps or {}, types or {}, choices or {}, flags or {}
    names = list(dict.fromkeys(k for s in ("full", "quick", "smoke") for k in configs.get(s, {})))
    self.fields = {n: _field_type(n, configs, types.get(n)) for n in names}
    self.config_class = dataclasses.make_dataclass(
        "Config", [(n, t, dataclasses.field(default_factory=functools.partial(
            copy.deepcopy, _scale_value(configs, "full", n)))) for n, t in self.fields.items()],
        frozen=True)
    self.parser = argparse.ArgumentParser(
        description=(doc or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Every configuration field is a flag; its help shows the full-scale default "
               "and the --quick one.")
    if "quick" in configs:
      self.parser.add_argument("--quick", action="store_true",
                               help=quick_help or "the quick scale's defaults")
    if "smoke" in configs:
      self.parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)
    if out is not None:
      self.parser.add_argument("--out", default=out, help="output folder (default: %(default)s)")
    if resumable:
      self.parser.add_argument("--checkpoint-dir", default=None,
                               help="orbax checkpoints after every chunk; rerun with the same "
                                    "folder to resume")
    group = self.parser.add_argument_group("configuration (defaults: full scale; quick)")
    self._dests = {}
    for name, annotation in self.fields.items():
      flag = flags.get(name, name)
      spellings = list(dict.fromkeys([f"--{flag}", f"--{flag.replace('_', '-')}"]))
      shown = "; ".join(f"{s}: {configs[s][name]!r}" for s in ("full", "quick")
                        if name in configs.get(s, {})) or "unset at full and quick scale"
      text = (helps.get(name, "") + f" ({shown})").strip().replace("%", "%%")
      kind, elem = _kind(annotation)
      allowed = choices.get(name)
      if kind == "bool":
        action = group.add_argument(*spellings, action=argparse.BooleanOptionalAction,
                                    default=None, help=text)
      elif kind == "scalar":
        action = group.add_argument(*spellings, type=elem, default=None, choices=allowed,
                                    help=text)
      elif kind == "sequence":
        action = group.add_argument(*spellings, type=_Elements(elem, allowed), nargs="+",
                                    action=_Extend, default=None, metavar=elem.__name__.upper(),
                                    help=text)
      else:
        action = group.add_argument(*spellings, type=_literal, default=None, metavar="LITERAL",
                                    help=text)
      self._dests[name] = (action.dest, annotation)

  def parse(self, argv: Sequence[str] | None = None) -> tuple[argparse.Namespace, str, dict]:
    """``(args, scale, config)``: the scale's configuration with the flags' overrides."""
    args = self.parser.parse_args(argv)
    scale, cfg = scale_config(args, self.configs, self._dests)
    self.config_class(**cfg)  # every key is a field
    return args, scale, cfg


def scale_config(args: argparse.Namespace, configs: dict[str, dict],
                 dests: dict[str, tuple[str, Any]] | None = None) -> tuple[str, dict]:
  """``(scale, config)`` from ``--smoke`` / ``--quick`` / full and the field flags.

  ``dests`` maps a field to its ``args`` attribute and type (what :class:`ExperimentCLI`
  builds); without it, only ``--seeds`` overrides. Raises ``ValueError`` if ``seeds`` < 1.
  """
  scale = "smoke" if getattr(args, "smoke", False) else (
      "quick" if getattr(args, "quick", False) else "full")
  cfg = copy.deepcopy(configs[scale])
  if dests is None:
    dests = {"seeds": ("seeds", int)}
  for name, (dest, annotation) in dests.items():
    value = getattr(args, dest, None)
    if value is None:
      continue
    default = cfg.get(name, _scale_value(configs, "full", name))
    if isinstance(value, dict) and isinstance(default, dict):
      value = _merge(default, value)
    elif isinstance(value, list):
      kind, _ = _kind(annotation)
      if kind == "sequence" and typing.get_origin(_strip_none(annotation)) is tuple:
        value = tuple(value)
    cfg[name] = value
  if "seeds" in cfg and isinstance(cfg["seeds"], int) and cfg["seeds"] < 1:
    raise ValueError(f"--seeds must be >= 1, got {cfg['seeds']}")
  return scale, cfg


def _scale_value(configs: dict[str, dict], scale: str, name: str) -> Any:
  """The value of ``name`` at ``scale``; for a key the scale lacks, the other scales' value."""
  for s in (scale, "full", "quick", "smoke"):
    if name in configs.get(s, {}):
      return configs[s][name]
  raise KeyError(name)


def _field_type(name: str, configs: dict[str, dict], given: Any) -> Any:
  """A field's type: ``given``, else read from its values over the scales."""
  if given is not None:
    return given
  values = [configs[s][name] for s in SCALES if name in configs.get(s, {})]
  kinds = {type(v) for v in values}
  if kinds <= {bool}:
    return bool
  if kinds <= {int, float} and float in kinds:
    return float
  if len(kinds) == 1 and kinds <= {int, str}:
    return kinds.pop()
  if kinds <= {list, tuple} and len(kinds) == 1:
    elems = {type(x) for v in values for x in v}
    container = kinds.pop()
    if elems <= {int, float} and elems:
      elem = float if float in elems else int
    elif elems == {str}:
      elem = str
    else:
      return container  # nested: parsed as a literal
    return list[elem] if container is list else tuple[elem, ...]
  return Any  # dicts, None: parsed as a literal


def _strip_none(annotation: Any) -> Any:
  args = [a for a in typing.get_args(annotation) if a is not type(None)]
  if typing.get_origin(annotation) in (types_module.UnionType, typing.Union) and len(args) == 1:
    return args[0]
  return annotation


def _kind(annotation: Any) -> tuple[str, Any]:
  """``("bool" | "scalar" | "sequence" | "literal", element type)`` of a field's type."""
  t = _strip_none(annotation)
  if t is bool:
    return "bool", bool
  if t in (int, float, str):
    return "scalar", t
  if typing.get_origin(t) in (list, tuple):
    elem = typing.get_args(t)[0] if typing.get_args(t) else None
    if elem in (int, float, str):
      return "sequence", elem
  return "literal", None


class _Elements:
  """Parses one command-line token of a sequence field: comma-separated elements."""

  def __init__(self, elem: type, allowed: Sequence[Any] | None):
    self.elem, self.allowed = elem, allowed
    self.__name__ = elem.__name__  # argparse names the type in its error messages

  def __call__(self, token: str) -> list:
    values = [self.elem(x) for x in token.split(",") if x != ""]
    bad = [v for v in values if self.allowed is not None and v not in self.allowed]
    if bad:
      raise argparse.ArgumentTypeError(f"{bad} not among {list(self.allowed)}")
    return values


class _Extend(argparse.Action):
  """Flattens the comma-split tokens of a sequence field into one list."""

  def __call__(self, parser, namespace, values, option_string=None):
    setattr(namespace, self.dest, [x for token in values for x in token])


def _literal(text: str) -> Any:
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError) as e:
    raise argparse.ArgumentTypeError(f"not a Python literal: {text!r} ({e})") from None


def _merge(base: dict, update: dict) -> dict:
  """``base`` with ``update``'s entries; nested dicts merged the same way."""
  out = dict(base)
  for k, v in update.items():
    out[k] = _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
  return out


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
      re-records a committed result changes them before it writes ``results.json``).

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
  skip = []
  if out is not None:
    rel = os.path.relpath(os.path.abspath(out), _ROOT)
    if rel != "." and not rel.startswith(os.pardir):
      skip = ["--", ".", f":(exclude){rel}"]
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


def trace_self_times(events: list[dict], key: Any = None
                     ) -> tuple[collections.Counter, collections.Counter]:
  """Self time in us (own duration less the events nested in it on its thread) and count
  per ``key(event)`` (default the event's name; events whose key is None are skipped) of a
  ``jax.profiler`` trace's complete events (``"ph": "X"``)."""
  key = (lambda e: e["name"]) if key is None else key
  self_us, count = collections.Counter(), collections.Counter()
  threads = collections.defaultdict(list)
  for e in events:
    if e.get("ph") == "X":
      threads[(e["pid"], e["tid"])].append(e)
  for evs in threads.values():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack, child = [], collections.Counter()
    for i, e in enumerate(evs):
      while stack and e["ts"] >= evs[stack[-1]]["ts"] + evs[stack[-1]]["dur"]:
        stack.pop()
      if stack:
        child[stack[-1]] += e["dur"]
      stack.append(i)
    for i, e in enumerate(evs):
      name = key(e)
      if name is not None:
        self_us[name] += e["dur"] - child[i]
        count[name] += 1
  return self_us, count


def time_interleaved(cases: dict, repeats: int, inner: int) -> dict[str, list[float]]:
  """Seconds per call of each jitted ``fn(*args) -> args``, one value per round.

  ``cases`` maps a name to ``(fn, args)``. Each of the ``repeats`` rounds times
  every case once (``inner`` calls), so the rounds interleave the cases and slow
  drift of a shared machine hits all of them alike; a ratio to the anchor is then
  taken within a round (paired). Everything is compiled first.
  """
  for fn, args in cases.values():
    jax.block_until_ready(fn(*args))
  times = {name: [] for name in cases}
  for _ in range(repeats):
    for name, (fn, args) in cases.items():
      start = time.perf_counter()
      state = args
      for _ in range(inner):
        state = fn(*state)
      jax.block_until_ready(state)
      times[name].append((time.perf_counter() - start) / inner)
  return times


def seed_mesh(axis: str = "seeds") -> jax.sharding.Mesh:
  """A 1-D mesh over every device (all hosts after ``jax.distributed.initialize()``)."""
  return jax.sharding.Mesh(np.asarray(jax.devices()), (axis,))


def shard_seeds(tree: Any, axis: str = "seeds") -> Any:
  """Places the leading (seed or batch) axis of each array leaf across all devices.

  The computation that consumes the result (a jitted, vmapped-over-seeds function)
  is then partitioned by XLA so each device runs its share of the seeds. Leaves
  whose leading size does not divide by the device count, and scalars, are
  replicated instead, with a warning: correct, just not parallel (pick ``--seeds``
  as a multiple of the device count). On one device the tree is returned
  unchanged. Pass only per-seed leaves: a shared array whose first
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
  if n == 1:
    # nothing to split; left as it is, because a committed placement is part of a compiled
    # program's identity, and the same function on uncommitted inputs elsewhere (a notebook's
    # demo, a test) would compile a second time
    return tree
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
