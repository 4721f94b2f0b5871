"""The code examples in README.md and docs/methods/*.md name things that exist.

Running every example would train models for minutes, so this checks what a move
or a rename breaks: each ```python block parses, its imports run, and every
attribute it reads off an imported jaxlab module (``matching.insert``,
``F.critical_step_size``, ``rc.RecoupleConfig``) resolves.
"""

import ast
import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "methods").glob("*.md"))]


def _blocks():
  for page in PAGES:
    for i, match in enumerate(re.finditer(r"```python\n(.*?)```", page.read_text(), re.S)):
      # notebook shell lines (!pip ...) are not Python
      code = "\n".join(line for line in match.group(1).splitlines()
                       if not line.lstrip().startswith(("!", "%")))
      yield pytest.param(code, id=f"{page.stem}-{i}")


def _resolve(name: str, node: ast.ImportFrom | ast.Import, alias: ast.alias):
  if isinstance(node, ast.Import):
    module = importlib.import_module(alias.name)
    return module if alias.asname else importlib.import_module(alias.name.split(".")[0])
  module = importlib.import_module(node.module)
  try:
    return getattr(module, alias.name)
  except AttributeError:
    return importlib.import_module(f"{node.module}.{alias.name}")


@pytest.mark.parametrize("code", list(_blocks()))
def test_example_names_exist(code):
  tree = ast.parse(code)
  bound = {}
  for node in ast.walk(tree):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
      for alias in node.names:
        name = alias.asname or alias.name.split(".")[0]
        bound[name] = _resolve(name, node, alias)
  for node in ast.walk(tree):
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
      obj = bound.get(node.value.id)
      if obj is not None and getattr(obj, "__name__", "").startswith(("jaxlab", "kernels")):
        assert hasattr(obj, node.attr), f"{node.value.id}.{node.attr} does not exist"
