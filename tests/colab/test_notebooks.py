"""Executes every Colab notebook at its tiny scale, so none of them can rot.

Each notebook reads ``JAXLAB_NOTEBOOK_SCALE`` (``tiny`` here) in its first code
cell and sizes its demo cells and its experiment run (``--smoke``) by it. The
first cell's install is the same in every notebook; it runs for real, offline, in
the first notebook (``JAXLAB_CHECKOUT`` names this checkout: ``pip install
--no-deps --no-build-isolation -e``, in a kernel of its own) and is skipped in the
others because jaxlab is importable. Notebooks run in a temporary directory, so
their results never land in the repository.

The other notebooks share one kernel per test process: before each, a hidden first
cell clears the user namespace (``%reset -f``, so a notebook that forgets an import
fails as in a fresh kernel), closes open figures, drops JAX's in-memory caches and
changes into the notebook's directory; after a failure the kernel restarts. What
sharing keeps is imported modules, i.e. the start-up and import time that each
fresh kernel paid again: on this project's 2-core machine tests/colab took 224 s
with a kernel per notebook and 176 s shared, with at most 1.5 GB in a shared kernel.
"""

import importlib.metadata
import importlib.util
import json
import os
import pathlib

import nbformat
import pytest
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parents[2]
COLAB = ROOT / "colab"
NOTEBOOKS = sorted(COLAB.glob("*.ipynb"))


def _install_block(path: pathlib.Path) -> str:
  """The first code cell up to the scale setting: the part that installs jaxlab."""
  first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
  return first.source.split("# \"quick\"")[0]


def _installed_from_this_checkout() -> bool:
  """Whether this environment's jaxlab is an editable install of this checkout, so that
  reinstalling it from here changes nothing (never repoint another checkout's install)."""
  # every jaxlab metadata on sys.path: the checkout's own jaxlab.egg-info (what an editable
  # build leaves there) has no direct_url.json; the installed one names its source
  for dist in importlib.metadata.distributions(name="jaxlab"):
    url = json.loads(dist.read_text("direct_url.json") or "{}").get("url", "")
    if url.removeprefix("file://").rstrip("/") == str(ROOT):
      return True
  return False


def test_every_notebook_installs_the_same_way():
  blocks = {p.stem: _install_block(p) for p in NOTEBOOKS}
  assert len(set(blocks.values())) == 1, "install cells differ: " + ", ".join(blocks)
  assert "JAXLAB_CHECKOUT" in blocks[NOTEBOOKS[0].stem]


def test_every_method_has_a_notebook():
  names = {p.stem for p in NOTEBOOKS}
  from experiments.run_all import ENTRIES
  missing = {e.module for e in ENTRIES} - names
  assert not missing, f"no colab notebook for {sorted(missing)}"


def _kernel_env(install: bool) -> dict[str, str]:
  env = dict(os.environ, JAXLAB_NOTEBOOK_SCALE="tiny")
  env.pop("MPLBACKEND", None)  # the kernel's own inline backend, as in Colab
  env.pop("JAXLAB_CHECKOUT", None)
  if install:
    env["JAXLAB_CHECKOUT"] = str(ROOT)
  return env


@pytest.fixture(scope="session")
def shared_kernel(tmp_path_factory):
  """One started kernel for the notebooks of this test process (see the module docstring)."""
  km = KernelManager(kernel_name="python3")
  km.start_kernel(env=_kernel_env(install=False), cwd=str(tmp_path_factory.mktemp("kernel")))
  yield km
  km.shutdown_kernel(now=True)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, request):
  # The install cell runs for real in one notebook (they share it, see above), offline, in a
  # kernel of its own.
  install = path == NOTEBOOKS[0] and _installed_from_this_checkout()
  nb = nbformat.read(path, as_version=4)
  first_code = next(c for c in nb.cells if c.cell_type == "code")
  assert "JAXLAB_REPO" in first_code.source and "JAXLAB_NOTEBOOK_SCALE" in first_code.source
  if install:
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=_kernel_env(install=True), cwd=str(tmp_path))
  else:
    km = request.getfixturevalue("shared_kernel")
    # binds no name: the notebook starts from an empty namespace
    nb.cells.insert(0, nbformat.v4.new_code_cell(
        f"%reset -f\n__import__('matplotlib.pyplot').pyplot.close('all')\n"
        f"__import__('jax').clear_caches()\n__import__('gc').collect()\n"
        f"__import__('os').chdir({str(tmp_path)!r})"))
  try:
    NotebookClient(nb, km=km, timeout=600, kernel_name="python3").execute()
  except BaseException:
    if not install:
      km.restart_kernel(now=True)  # the next notebook starts clean
    raise
  finally:
    if install:
      km.shutdown_kernel(now=True)
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  installed = any("installed jaxlab from" in o.get("text", "") for o in outputs)
  assert installed == install
  # every notebook ends by running its experiment, which writes a summary table, and shows
  # its figures inline (importing an experiment must not switch matplotlib's backend)
  assert list(tmp_path.glob("results/*/summary.md")), os.listdir(tmp_path)
  assert any("image/png" in o.get("data", {}) for o in outputs)
  # where the experiment's own smoke run executes only here (once per suite), its test
  # module's checks run on the notebook's output
  checks = getattr(_experiment_tests(path.stem), "check_smoke_results", None)
  if checks is not None:
    checks(tmp_path / "results" / path.stem)


def _experiment_tests(name: str):
  """``tests/experiments/test_<name>.py`` as a module (loaded by path: tests is no package)."""
  file = ROOT / "tests" / "experiments" / f"test_{name}.py"
  spec = importlib.util.spec_from_file_location(f"_notebook_checks_{name}", file)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
