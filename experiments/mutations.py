"""Mutation runs by hand: does a test fail when a method's central lines are wrong?

    python -m experiments.mutations ttm            # every mutation in ttm's list
    python -m experiments.mutations ttm --only 2   # the third one
    python -m experiments.mutations --all          # every list found

Each method keeps a list of one-line mutations of its central lines beside its tests, as
``tests/<package>/mutations_<name>.toml``::

    tests = ["tests/preference/test_ttm.py"]     # the tests that must catch them

    [[mutation]]
    file = "jaxlab/preference/ttm.py"
    find = "return totals[..., 0] > jnp.max(totals[..., 1:], axis=-1)"
    replace = "return totals[..., 0] >= jnp.max(totals[..., 1:], axis=-1)"
    why = "a tie with another assignment counts as a match"

For each mutation the tracked files are copied to a scratch folder (once), ``find`` is
replaced by ``replace`` in ``file`` (it must occur exactly once), the list's tests run there
(``python -m pytest -x`` with the repository's pytest options), and the file is restored. A
mutation the tests do not catch ("survived") is a missing test. The report is written beside
the list (``mutations_<name>.report.md``: commit, date, each mutation's outcome and its
failing test) and committed with it. Not part of CI: a list runs its tests once per mutation.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Mutation(NamedTuple):
  file: str  # relative to the repository root
  find: str  # the exact text of the central line (occurs once in the file)
  replace: str  # the mutated text
  why: str  # what the mutation breaks, in words


class Outcome(NamedTuple):
  mutation: Mutation
  status: str  # "killed" | "survived" | "not applicable"
  detail: str  # the first failing test, or why the mutation could not be applied
  seconds: float


def find_lists(root: str = ROOT) -> dict[str, str]:
  """Every mutation list under ``tests/``: name -> path."""
  paths = glob.glob(os.path.join(root, "tests", "**", "mutations_*.toml"), recursive=True)
  return {os.path.basename(p)[len("mutations_"):-len(".toml")]: p for p in sorted(paths)}


def load_list(path: str) -> tuple[list[str], list[Mutation]]:
  """``(tests, mutations)`` of one list; raises ``ValueError`` naming what is malformed."""
  with open(path, "rb") as fh:
    data = tomllib.load(fh)
  tests = data.get("tests")
  if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
    raise ValueError(f"{path}: 'tests' must be a non-empty list of test paths")
  mutations = []
  for i, m in enumerate(data.get("mutation", [])):
    missing = {"file", "find", "replace", "why"} - set(m)
    if missing:
      raise ValueError(f"{path}: mutation {i} lacks {sorted(missing)}")
    if m["find"] == m["replace"]:
      raise ValueError(f"{path}: mutation {i} replaces its text by itself")
    mutations.append(Mutation(m["file"], m["find"], m["replace"], m["why"]))
  if not mutations:
    raise ValueError(f"{path}: no [[mutation]] entries")
  return tests, mutations


def scratch_copy(root: str = ROOT) -> str:
  """The tracked files of ``root`` (working-tree contents) copied to a new temporary folder."""
  files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True,
                         check=True).stdout.decode().split("\0")
  dest = tempfile.mkdtemp(prefix="jaxlab-mutations-")
  for rel in filter(None, files):
    src = os.path.join(root, rel)
    if os.path.isfile(src):
      os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
      shutil.copy2(src, os.path.join(dest, rel))
  return dest


def _first_failure(output: str) -> str:
  m = re.search(r"^(?:FAILED|ERROR) (.+?)(?: - .*)?$", output, re.M)
  return m.group(1) if m else output.strip().splitlines()[-1] if output.strip() else "?"


def run_one(scratch: str, tests: list[str], mutation: Mutation, timeout: float) -> Outcome:
  """Applies ``mutation`` in ``scratch``, runs ``tests`` there, restores the file."""
  path = os.path.join(scratch, mutation.file)
  if not os.path.exists(path):
    return Outcome(mutation, "not applicable", f"no file {mutation.file}", 0.0)
  with open(path) as fh:
    original = fh.read()
  count = original.count(mutation.find)
  if count != 1:
    return Outcome(mutation, "not applicable", f"'find' occurs {count} times", 0.0)
  start = time.time()
  try:
    with open(path, "w") as fh:
      fh.write(original.replace(mutation.find, mutation.replace))
    env = {**os.environ, "PYTHONPATH": scratch, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
      proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p",
                             "no:cacheprovider", *tests], cwd=scratch, env=env,
                            capture_output=True, text=True, timeout=timeout)
      killed, detail = proc.returncode != 0, _first_failure(proc.stdout + proc.stderr)
    except subprocess.TimeoutExpired:
      killed, detail = True, f"timed out after {timeout:.0f} s (counted as caught)"
  finally:
    with open(path, "w") as fh:
      fh.write(original)
  return Outcome(mutation, "killed" if killed else "survived",
                 detail if killed else "all tests passed", time.time() - start)


def report(name: str, tests: list[str], outcomes: list[Outcome], commit: str | None) -> str:
  """The markdown report of one list's run."""
  date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
  survived = sum(o.status == "survived" for o in outcomes)
  lines = [f"# Mutations of {name}", "",
           f"`python -m experiments.mutations {name}` at {commit or 'an unknown commit'}, "
           f"{date}: {len(outcomes)} mutations, {survived} survived; tests: "
           + ", ".join(f"`{t}`" for t in tests) + ".", "",
           "| # | file | mutation | why | outcome | caught by |", "|---|---|---|---|---|---|"]
  cell = lambda s: s.replace("|", "\\|").replace("\n", " ")  # noqa: E731
  for i, o in enumerate(outcomes):
    m = o.mutation
    lines.append(f"| {i} | `{m.file}` | `{cell(m.find)}` → `{cell(m.replace)}` | {cell(m.why)} | "
                 f"{o.status} ({o.seconds:.0f} s) | {cell(o.detail)} |")
  return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
  lists = find_lists()
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("names", nargs="*", help=f"lists to run (known: {sorted(lists)})")
  parser.add_argument("--all", action="store_true", help="run every list")
  parser.add_argument("--only", type=int, nargs="+", default=None,
                      help="run only these mutations (0-based indices)")
  parser.add_argument("--timeout", type=float, default=900.0,
                      help="seconds allowed for one mutation's tests (default: %(default)s)")
  parser.add_argument("--no-report", action="store_true", help="print only; write no report")
  args = parser.parse_args(argv)
  unknown = [n for n in args.names if n not in lists]
  if unknown or not (args.names or args.all):
    parser.error(f"name lists to run, or --all; unknown {unknown}, known {sorted(lists)}")
  names = sorted(lists) if args.all else args.names
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip() or None
  dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                          ":(exclude,glob)**/mutations_*.report.md"], cwd=ROOT,
                         capture_output=True, text=True).stdout.strip()  # reports: outputs
  if commit and dirty:
    commit += " with uncommitted changes"
  scratch = scratch_copy()
  survived = 0
  try:
    for name in names:
      tests, mutations = load_list(lists[name])
      chosen = range(len(mutations)) if args.only is None else args.only
      outcomes = []
      for i in chosen:
        o = run_one(scratch, tests, mutations[i], args.timeout)
        print(f"{name} #{i}: {o.status} ({o.seconds:.0f} s) {o.detail}", flush=True)
        outcomes.append(o)
      survived += sum(o.status != "killed" for o in outcomes)
      if not args.no_report and args.only is None:
        with open(lists[name][:-len(".toml")] + ".report.md", "w") as fh:
          fh.write(report(name, tests, outcomes, commit))
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  return 1 if survived else 0


if __name__ == "__main__":
  sys.exit(main())
