"""Every experiment script's command line: each configuration field is a flag, shown in
``--help`` with its defaults, and a value given on the command line reaches the config.

Parsing only: no experiment runs here.
"""

import importlib
import pkgutil

import pytest

import experiments
from experiments.cli import ExperimentCLI, _kind

# scripts only: packages (experiments/cpp, the official C++ program's build) are helpers,
# docs is the doc generator, mutations the mutation runner (argparse of its own), and cli,
# records, reporting, timing, pages, methods and protocol are the scripts' shared modules
SHARED = ("__init__", "cli", "docs", "methods", "mutations", "pages", "protocol", "records",
          "reporting", "timing")
MODULES = sorted(m.name for m in pkgutil.iter_modules(experiments.__path__)
                 if not m.ispkg and m.name not in SHARED)


def _changed(value, kind, elem, choices):
  """``(argv tokens, expected value)`` giving the field something other than ``value``."""
  if kind == "bool":
    return ([] if value else []), not value  # the flag spelling is chosen by the caller
  if kind == "scalar":
    if choices:
      new = next(c for c in choices if c != value)
    elif elem is str:
      new = f"{value}_changed"
    elif elem is int:
      new = (value or 0) + 3
    else:
      new = (value or 0.0) * 2 + 0.5
    return [str(new)], new
  if kind == "sequence":
    if choices:
      new = list(choices[:1])
    else:
      new = {int: [7, 9], float: [0.5, 0.25], str: ["a", "b"]}[elem]
    as_tuple = isinstance(value, tuple)
    return [",".join(map(str, new))], (tuple(new) if as_tuple else new)
  return [repr(value)], value  # literals round-trip


@pytest.mark.parametrize("name", MODULES)
def test_help_lists_every_field_and_overrides_reach_the_config(name, capsys):
  module = importlib.import_module(f"experiments.{name}")
  cli = module.cli()
  assert isinstance(cli, ExperimentCLI)
  with pytest.raises(SystemExit) as exit_info:
    module.main(["--help"])
  assert exit_info.value.code == 0
  text = capsys.readouterr().out
  scales = [s for s in ("full", "quick") if s in cli.configs]
  for field, annotation in cli.fields.items():
    flag = cli.parser._option_string_actions  # every spelling of every flag
    dest, _ = cli._dests[field]
    spelling = next(o for o, a in flag.items() if a.dest == dest)
    assert spelling in text, (name, field)
    # the full-scale default is printed (help wraps lines, even at hyphens)
    if field in cli.configs["full"] and _kind(annotation)[0] != "literal":
      shown = f"full: {cli.configs['full'][field]!r}"
      assert "".join(shown.split()) in "".join(text.split()), (name, field)
    # one override at a time, at each scale, reaches the parsed config
    kind, elem = _kind(annotation)
    choices = flag[spelling].choices
    if kind == "sequence":
      choices = flag[spelling].type.allowed
    for scale in scales:
      base = cli.configs[scale].get(field, cli.configs["full"].get(field))
      if base is None and kind == "literal":
        continue  # a field only the smoke scale sets (alpha_dpo's extra_tasks)
      tokens, expected = _changed(base, kind, elem, choices)
      if kind == "bool":
        spelled = spelling if expected else spelling.replace("--", "--no-", 1)
        argv = [spelled]
      elif kind == "scalar":  # --flag=value: also a value that starts with "-" (--cpp-opt=-O0)
        argv = [f"{spelling}={tokens[0]}"]
      else:
        argv = [spelling, *tokens]
      if scale == "quick":
        argv.append("--quick")
      _, parsed_scale, cfg = cli.parse(argv)
      assert parsed_scale == scale
      assert cfg[field] == expected, (name, field, argv, cfg[field])
      # the other fields keep the scale's values
      for other, value in cli.configs[scale].items():
        if other != field:
          assert cfg[other] == value, (name, field, other)


def test_defaults_without_flags_are_the_scale_configs():
  for name in MODULES:
    cli = importlib.import_module(f"experiments.{name}").cli()
    for scale in ("full", "quick", "smoke"):
      if scale in cli.configs:
        argv = [f"--{scale}"] if scale != "full" else []
        assert cli.parse(argv)[1:] == (scale, cli.configs[scale]), (name, scale)
    assert cli.config_class().__dataclass_params__.frozen


def test_sequences_dicts_and_validation():
  cli = importlib.import_module("experiments.alpha_dpo").cli()
  # --tasks selects task names; the settings dict is --task_settings, merged entry by entry
  args, _, cfg = cli.parse(["--quick", "--task-settings", "{'mixture': {'lr': 0.5}}",
                            "--tasks", "mixture", "--flips", "0", "0.1,0.2"])
  assert args.tasks == ["mixture"] and cfg["flips"] == (0.0, 0.1, 0.2)
  assert cfg["tasks"]["mixture"]["lr"] == 0.5
  assert cfg["tasks"]["mixture"]["pairs"] == cli.configs["quick"]["tasks"]["mixture"]["pairs"]
  with pytest.raises(ValueError, match="--seeds"):
    cli.parse(["--seeds", "0"])
  with pytest.raises(SystemExit):  # not a literal
    cli.parse(["--task-settings", "{oops"])
  m = importlib.import_module("experiments.matching_incremental").cli()
  _, _, cfg = m.parse(["--instances", "[('uniform', 50)]", "--algorithms", "exact"])
  assert cfg["instances"] == [("uniform", 50)] and cfg["algorithms"] == ["exact"]
  with pytest.raises(SystemExit):  # not among the choices
    m.parse(["--algorithms", "simplex"])
  q = importlib.import_module("experiments.quant_optim").cli()
  assert q.parse(["--max-examples", "5"])[2]["max_examples"] == 5
  with pytest.raises(SystemExit):
    q.parse(["--dataset", "imagenet"])
