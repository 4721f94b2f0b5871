"""Suite-wide setup: one persistent JAX compilation cache for the whole run.

Several tests run the same programs in different processes: an experiment's
``--smoke`` run in its own test, inside its Colab notebook's kernel, and under
``run_all``'s subprocesses. A cache directory shared through the environment
(which those child processes, and pytest-xdist's workers, inherit) lets each
program compile once per suite run. The directory is new for every run and
removed at its end, so results never depend on an old cache; set
``JAX_COMPILATION_CACHE_DIR`` yourself to keep one.
"""

import atexit
import functools
import os
import shutil
import tempfile

if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  _cache = tempfile.mkdtemp(prefix="jaxlab-jit-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  atexit.register(functools.partial(shutil.rmtree, _cache, ignore_errors=True))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# At smoke sizes XLA's compile time dominates the suite, and most of it is LLVM optimizing
# CPU code that then runs for milliseconds: the tests compile at backend optimization level
# 0 (measured: quant_optim's smoke test 109 s -> 78 s on this project's 2-core machine).
# Each operation keeps its IEEE semantics; what may differ from the default level is
# fusion, i.e. the order of some float reductions, which the suite's tolerances allow for
# (the suite passed at both levels when this setting was introduced).
# JAXLAB_TEST_XLA_DEFAULT_OPT=1 runs the suite at XLA's default level instead.
if not os.environ.get("JAXLAB_TEST_XLA_DEFAULT_OPT"):
  os.environ["XLA_FLAGS"] = " ".join(
      [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip()
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Figures are written to files; without a display matplotlib would pick Agg anyway.
os.environ.setdefault("MPLBACKEND", "Agg")
