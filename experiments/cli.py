"""The command line every experiment script shares, generated from its configuration.

:class:`ExperimentCLI` turns a script's per-scale configuration dicts (``"full"``, and
optionally ``"quick"`` and ``"smoke"``, the :data:`SCALES`) into an ``argparse`` parser with
one flag per configuration field; :func:`scale_config` reads the chosen scale's configuration
with the flags' overrides.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import functools
import types as types_module
import typing
from collections.abc import Sequence
from typing import Any

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
