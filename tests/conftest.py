"""Suite-wide setup: one persistent JAX compilation cache for the whole run.

Several tests run the same programs in different processes: an experiment's
``--smoke`` run in its own test, inside its Colab notebook's kernel, and under
``run_all``'s subprocesses. A cache directory shared through the environment
(which those child processes inherit) lets each program compile once per suite
run. The directory is new for every run, so results never depend on an old
cache; set ``JAX_COMPILATION_CACHE_DIR`` yourself to reuse one.
"""

import os
import tempfile

os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", tempfile.mkdtemp(prefix="jaxlab-jit-cache-"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
