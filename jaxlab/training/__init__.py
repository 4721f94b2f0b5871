"""Shared training drivers and schedules.

Modules: :mod:`jaxlab.training.fit` (the one scanned minibatch fit loop, :func:`fit`,
with :func:`minibatch_sampler`; the package attribute ``fit`` is the function),
:mod:`~jaxlab.training.schedules` (per-step learning-rate arrays),
:mod:`~jaxlab.training.sharding` (data-parallel / FSDP placement on a ``jax.sharding`` mesh,
and :func:`shard_seeds` / :func:`seed_mesh`: the seed axis split over every device),
:mod:`~jaxlab.training.chunks` (run jitted chunks with orbax checkpoints and
resume; imported on first use so that importing :mod:`jaxlab.training` does not
import orbax).
"""

from jaxlab.training import schedules, sharding
from jaxlab.training.fit import FitResult, FitState, StepMetrics, fit, minibatch_sampler
from jaxlab.training.schedules import SCHEDULES, lr_schedule
from jaxlab.training.sharding import seed_mesh, shard_seeds

__all__ = ["SCHEDULES", "FitResult", "FitState", "StepMetrics", "chunks", "fit", "lr_schedule",
           "minibatch_sampler", "run_chunks", "schedules", "seed_mesh", "shard_seeds",
           "sharding"]


def __getattr__(name: str):
  # orbax is heavy and only the long-run drivers need it: import it lazily.
  if name in ("chunks", "run_chunks"):
    import importlib
    chunks = importlib.import_module("jaxlab.training.chunks")
    return chunks if name == "chunks" else chunks.run_chunks
  raise AttributeError(f"module 'jaxlab.training' has no attribute {name!r}")
