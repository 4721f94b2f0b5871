"""The package's import layers (README, "Layout"): imports flow one way.

Every ``import`` in ``jaxlab/`` and ``kernels_pallas/`` (module level or inside a
function, absolute or relative) and every ``importlib.import_module`` call is read with
``ast`` and checked against the table below.
"""

import ast
import pathlib
import subprocess
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]

FOUNDATION = ("jaxlab.core", "jaxlab.quant")  # leaf numerics: keys, checks, float formats
SHARED = ("jaxlab.nn", "jaxlab.training", "jaxlab.data", "jaxlab.envs")
METHODS = ("jaxlab.optim", "jaxlab.matching", "jaxlab.rl", "jaxlab.dynamics",
           "jaxlab.preference", "jaxlab.lm", "jaxlab.inference", "jaxlab.generative",
           "jaxlab.safety", "jaxlab.agents", "jaxlab.vision")
# package -> the jaxlab packages it may import (besides itself)
ALLOWED = {
    "jaxlab.core": (),
    "jaxlab.quant": ("jaxlab.core",),
    "kernels_pallas": FOUNDATION,
    "jaxlab.nn": ("jaxlab.core",),
    "jaxlab.training": ("jaxlab.core",),
    "jaxlab.data": ("jaxlab.core",),
    "jaxlab.envs": ("jaxlab.core",),
    "jaxlab.models": (*FOUNDATION, *SHARED),
    **{m: (*FOUNDATION, *SHARED, "jaxlab.models", "kernels_pallas") for m in METHODS},
    "jaxlab": (),
}
TOPS = ("jaxlab", "kernels_pallas", "experiments")  # the imports this test reads


def _package(module: str) -> str:
  parts = module.split(".")
  return parts[0] if parts[0] == "kernels_pallas" else ".".join(parts[:2])


def _absolute(name: str, package: str) -> str:
  """``name`` with its leading dots (a relative import) resolved against ``package``."""
  level = len(name) - len(name.lstrip("."))
  if not level:
    return name
  parts = package.split(".") if package else []
  if level > len(parts):
    raise ValueError(f"relative import {name!r} goes above the top of package {package!r}")
  base = ".".join(parts[:len(parts) - level + 1])
  return f"{base}.{name[level:]}" if name[level:] else base


def _literal_prefix(node: ast.expr) -> tuple[str, bool]:
  """The text a string expression surely starts with, and whether that is all of it."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return node.value, True
  if isinstance(node, ast.JoinedStr):  # f"jaxlab.data.{name}"
    prefix = ""
    for part in node.values:
      if not isinstance(part, ast.Constant):
        return prefix, False
      prefix += part.value
    return prefix, True
  if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # "jaxlab." + name
    left, whole = _literal_prefix(node.left)
    if not whole:
      return left, False
    right, whole = _literal_prefix(node.right)
    return left + right, whole
  return "", False


def _import_module_target(call: ast.Call, package: str) -> str | None:
  """The module an ``importlib.import_module`` call names, as far as its argument is literal.

  A literal name (relative ones resolved against the call's literal ``package`` argument,
  else against the file's package) is returned whole; of an f-string or other expression,
  only the complete dotted components of its literal prefix, and only when that prefix
  names one of the packages this test reads; anything else is ``None``.
  """
  func = call.func
  if not ((isinstance(func, ast.Attribute) and func.attr == "import_module"
           and isinstance(func.value, ast.Name) and func.value.id == "importlib")
          or (isinstance(func, ast.Name) and func.id == "import_module")):
    return None
  args = {**dict(enumerate(call.args)), **{k.arg: k.value for k in call.keywords}}
  name_node = args.get(0, args.get("name"))
  if name_node is None:
    return None
  name, whole = _literal_prefix(name_node)
  if whole:
    anchor = args.get(1, args.get("package"))
    anchor, anchor_whole = ("", False) if anchor is None else _literal_prefix(anchor)
    return _absolute(name, anchor if anchor_whole else package)
  if name.startswith(tuple(f"{top}." for top in TOPS)):
    return name[:name.rindex(".")]  # drop the component the expression may complete
  return None


def _imports(source: str, package: str) -> set[str]:
  """The jaxlab, kernels_pallas and experiments modules that ``source`` imports.

  Args:
    source: a module's text.
    package: the package the module belongs to (its ``__package__``), against which
      relative imports resolve.
  """
  names = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0:
      names.add(node.module)
    elif isinstance(node, ast.ImportFrom):  # from . import x, from .m import y, from .. import z
      base = _absolute("." * node.level + (node.module or ""), package)
      names.update([base] if node.module else (f"{base}.{a.name}" for a in node.names))
    elif isinstance(node, ast.Call) and (target := _import_module_target(node, package)):
      names.add(target)
  return {n for n in names if n.split(".")[0] in TOPS}


def _violations(module: str, names: set[str]) -> list[str]:
  own = _package(module)
  return [f"{module} imports {name}" for name in sorted(names)
          if _package(name) != own and _package(name) not in ALLOWED[own]]


def _modules():
  for top in ("jaxlab", "kernels_pallas"):
    for path in sorted((ROOT / top).rglob("*.py")):
      rel = path.relative_to(ROOT).with_suffix("")
      parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
      package = ".".join(rel.parts[:-1])  # the module's __package__
      yield ".".join(parts), package, path


def test_every_package_has_a_layer():
  missing = {_package(m) for m, _, _ in _modules()} - set(ALLOWED)
  assert not missing, f"add these packages to ALLOWED (and the README's layer picture): {missing}"


def test_imports_flow_one_way():
  bad = []
  for module, package, path in _modules():
    bad += _violations(module, _imports(path.read_text(), package))
  assert not bad, "\n".join(bad)


def test_relative_and_importlib_imports_are_read():
  # as if in jaxlab/preference/ttm.py: every import below but envs' leaves the layers
  source = textwrap.dedent("""
      import importlib
      from importlib import import_module
      from . import digit_pairs
      from .ttm import group_match
      from ..rl import agents
      from .. import envs, safety
      def load(name):
        importlib.import_module("jaxlab.matching.exact")
        importlib.import_module(f"jaxlab.generative.{name}")
        importlib.import_module("jaxlab.lm." + name)
        importlib.import_module(f"numpy.{name}")       # not ours: ignored
        importlib.import_module(name)                  # nothing literal: ignored
        import_module(".fastflow", package="jaxlab.generative")
        return import_module("..vision", __package__)
  """)
  names = _imports(source, "jaxlab.preference")
  assert names == {"jaxlab.preference.digit_pairs", "jaxlab.preference.ttm", "jaxlab.rl",
                   "jaxlab.envs", "jaxlab.safety", "jaxlab.matching.exact", "jaxlab.generative",
                   "jaxlab.lm", "jaxlab.generative.fastflow", "jaxlab.vision"}
  assert _violations("jaxlab.preference.ttm", names) == [
      f"jaxlab.preference.ttm imports {n}"
      for n in ("jaxlab.generative", "jaxlab.generative.fastflow", "jaxlab.lm",
                "jaxlab.matching.exact", "jaxlab.rl", "jaxlab.safety", "jaxlab.vision")]


def test_importing_a_model_does_not_import_agents_or_orbax():
  # One fresh process: jaxlab.models imports the transformer, the DDPM and jaxlab.nn, so
  # anything one of them pulled in would show here (the test asserts it does import them).
  code = ("import sys, jaxlab.models; "
          "assert {'jaxlab.models.transformer', 'jaxlab.models.ddpm', 'jaxlab.nn'} "
          "<= set(sys.modules); "
          "print(sorted(m for m in sys.modules if m.split('.')[0] == 'orbax' "
          "or m.startswith(('jaxlab.rl', 'jaxlab.envs', 'gymnax'))))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
  assert out.stdout.strip() == "[]", out.stdout
