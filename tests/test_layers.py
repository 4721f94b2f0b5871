"""The package's import layers (README, "Layout"): imports flow one way.

Every ``import`` in ``jaxlab/`` and ``kernels_pallas/`` (module level or inside a
function) is read with ``ast`` and checked against the table below.
"""

import ast
import pathlib
import subprocess
import sys

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
    # a method may build on another method's public solver; these edges are listed one by one
    # so that no cycle can form (TTM's hard pseudo-labels use matching's exact assignment)
    "jaxlab.preference": (*FOUNDATION, *SHARED, "jaxlab.models", "kernels_pallas",
                          "jaxlab.matching"),
    # CARE's entity reward uses matching's exact assignment
  "jaxlab.vision": (*FOUNDATION, *SHARED, "jaxlab.models", "kernels_pallas",
                    "jaxlab.matching"),
  "jaxlab.trec": ("jaxlab.dynamics",),  # re-export of jaxlab.dynamics.trec
    "jaxlab": (),
}


def _package(module: str) -> str:
  parts = module.split(".")
  return parts[0] if parts[0] == "kernels_pallas" else ".".join(parts[:2])


def _imports(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names.update(a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names.add(node.module)
  return {n for n in names if n.split(".")[0] in ("jaxlab", "kernels_pallas", "experiments")}


def _modules():
  for top in ("jaxlab", "kernels_pallas"):
    for path in sorted((ROOT / top).rglob("*.py")):
      rel = path.relative_to(ROOT).with_suffix("")
      parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
      yield ".".join(parts), path


def test_every_package_has_a_layer():
  missing = {_package(m) for m, _ in _modules()} - set(ALLOWED)
  assert not missing, f"add these packages to ALLOWED (and the README's layer picture): {missing}"


def test_imports_flow_one_way():
  bad = []
  for module, path in _modules():
    own = _package(module)
    for name in _imports(path):
      other = _package(name)
      if other != own and other not in ALLOWED[own]:
        bad.append(f"{module} imports {name}")
  assert not bad, "\n".join(bad)


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
