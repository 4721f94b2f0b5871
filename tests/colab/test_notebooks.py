"""Executes every Colab notebook at its tiny scale, so none of them can rot.

Each notebook reads ``JAXLAB_NOTEBOOK_SCALE`` (``tiny`` here) in its first code
cell and sizes its demo cells and its experiment run (``--smoke``) by it. The
first cell's pip install is skipped because jaxlab is importable. Notebooks run
in a fresh kernel in a temporary directory, so their results never land in the
repository.
"""

import os
import pathlib

import nbformat
import pytest
from nbclient import NotebookClient

COLAB = pathlib.Path(__file__).parents[2] / "colab"
NOTEBOOKS = sorted(COLAB.glob("*.ipynb"))


def test_every_method_has_a_notebook():
  names = {p.stem for p in NOTEBOOKS}
  from experiments.run_all import ENTRIES
  missing = {e.module for e in ENTRIES} - names
  assert not missing, f"no colab notebook for {sorted(missing)}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv("JAXLAB_NOTEBOOK_SCALE", "tiny")
  monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's own inline backend, as in Colab
  nb = nbformat.read(path, as_version=4)
  first_code = next(c for c in nb.cells if c.cell_type == "code")
  assert "JAXLAB_REPO" in first_code.source and "JAXLAB_NOTEBOOK_SCALE" in first_code.source
  NotebookClient(nb, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": str(tmp_path)}}).execute()
  outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
  assert not [o for o in outputs if o.get("output_type") == "error"]
  # every notebook ends by running its experiment, which writes a summary table, and shows
  # its figures inline (importing an experiment must not switch matplotlib's backend)
  assert list(tmp_path.glob("results/*/summary.md")), os.listdir(tmp_path)
  assert any("image/png" in o.get("data", {}) for o in outputs)
