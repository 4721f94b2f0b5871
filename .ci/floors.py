"""Writes a pip constraints file pinning every declared floor: ``name>=X`` becomes ``name==X``.

Reads ``pyproject.toml``'s ``[build-system] requires``, ``[project] dependencies`` and the
optional-dependency groups named on the command line (default: ``dev``), so that
``PIP_CONSTRAINT=<file> pip install -e ".[dev]"`` installs exactly the oldest releases the
project claims to support, build backend included (pip hands ``PIP_CONSTRAINT`` to the
isolated build environment too). A floor that names no released version makes that install
fail, which is the point: every floor must be a version one can install.

Usage: python .ci/floors.py OUT_FILE [GROUP ...]   (standard library only: runs before any
virtual environment exists)
"""

import pathlib
import re
import sys
import tomllib

# name, optional [extras], then a ">=" floor; other specifiers (<, !=) may follow after a comma.
_FLOOR = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*>=\s*([^,;\s]+)")


def floors(requirements: list[str]) -> dict[str, str]:
  """``{name: floor}`` for each requirement with a ``>=`` floor (names normalized)."""
  out = {}
  for req in requirements:
    m = _FLOOR.match(req)
    if m:
      out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
  return out


def main(argv: list[str]) -> None:
  if not argv:
    sys.exit(__doc__)
  root = pathlib.Path(__file__).resolve().parent.parent
  with open(root / "pyproject.toml", "rb") as f:
    project = tomllib.load(f)
  groups = argv[1:] or ["dev"]
  reqs = list(project["build-system"]["requires"]) + list(project["project"]["dependencies"])
  for group in groups:
    reqs += project["project"]["optional-dependencies"][group]
  pins = floors(reqs)
  pathlib.Path(argv[0]).write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
  print(f"{len(pins)} floors pinned in {argv[0]}: "
        + ", ".join(f"{n}=={v}" for n, v in sorted(pins.items())))


if __name__ == "__main__":
  main(sys.argv[1:])
