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
# CPU code that then runs for milliseconds. The tests compile at backend optimization
# level 0 and with XLA:CPU's classic elemental fusion emitters instead of the newer MLIR
# ones (measured on this project's 2-core machine: the whole suite 505 s -> 350 s, the
# emitters alone test_contract.py + test_hrl.py 122 s -> 94 s). What may differ from the
# defaults is fusion, i.e. the order of some float reductions, which the suite's
# tolerances allow for, and subnormals: with both settings a float min/max flushes a
# subnormal operand to zero (as TPUs do), which is why the float quantizers saturate on
# the integer bits. The suite passes under both settings and under the defaults.
# JAXLAB_TEST_XLA_DEFAULT_OPT=1 runs the suite with XLA's defaults instead.
if not os.environ.get("JAXLAB_TEST_XLA_DEFAULT_OPT"):
  os.environ["XLA_FLAGS"] = " ".join(
      [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0",
       "--xla_cpu_use_fusion_emitters=false"]).strip()
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
# Figures are written to files; without a display matplotlib would pick Agg anyway.
os.environ.setdefault("MPLBACKEND", "Agg")
