"""Helpers every experiment script shares: scale selection, writing results, the
report rows ``run_all`` collects, and sharding seeds over devices."""

from __future__ import annotations

import argparse
import json
import os
import warnings
from typing import Any, NamedTuple

import jax
import numpy as np


def scale_config(args: argparse.Namespace, configs: dict[str, dict]) -> tuple[str, dict]:
  """``(scale, config)`` from ``--smoke`` / ``--quick`` / full and an optional ``--seeds``."""
  scale = "smoke" if getattr(args, "smoke", False) else "quick" if args.quick else "full"
  cfg = dict(configs[scale])
  if getattr(args, "seeds", None) is not None:
    if args.seeds < 1:
      raise ValueError(f"--seeds must be >= 1, got {args.seeds}")
    cfg["seeds"] = args.seeds
  return scale, cfg


def machine() -> dict[str, str]:
  """The backend and JAX version an experiment ran on (for its ``results.json``)."""
  return {"backend": jax.default_backend(), "jax": jax.__version__}


def write_results(out: str, name: str, result: dict, table: str, note: str = "") -> None:
  """Writes ``results.json`` and ``summary.md`` (title, wall time, note, table); prints it."""
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(result, f, indent=1, default=str)
  with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(f"# {name} ({result['scale']}), {result['wall_time_s']:.0f} s\n\n"
            + (note + "\n\n" if note else "") + table + "\n")
  print(table)
  print(f"\nwall time {result['wall_time_s']:.1f} s; results in {out}")


class Claim(NamedTuple):
  """One row of ``run_all``'s report: a paper's claim and what we measured of it.

  ``held`` is computed from the measured numbers (``True`` / ``False``), or ``None``
  where this scale cannot test the claim.
  """

  claim: str  # the paper's claim in one sentence
  measured: str  # our numbers, with their spread across seeds
  held: bool | None


def check_claims(rows: list) -> list[Claim]:
  """``rows`` if each is a :class:`Claim` with text and a ``bool``/``None`` verdict.

  ``run_all`` calls it on every ``claims()`` result, so a malformed row is reported
  as a claims error instead of a wrong table; tests call it on recorded results.

  Raises:
    TypeError: naming the first row that is not a Claim or whose ``held`` is not
      ``True``/``False``/``None``.
    ValueError: naming the first row with an empty ``claim`` or ``measured``.
  """
  for i, row in enumerate(rows):
    if not isinstance(row, Claim):
      raise TypeError(f"claims row {i} must be a Claim, got {type(row).__name__}")
    if not (row.held is None or isinstance(row.held, bool)):
      raise TypeError(f"claims row {i}: held must be True, False or None, got {row.held!r}")
    if not (isinstance(row.claim, str) and row.claim and isinstance(row.measured, str)
            and row.measured):
      raise ValueError(f"claims row {i}: claim and measured must be non-empty strings")
  return list(rows)


class Ratio(NamedTuple):
  """One benchmark ratio for ``run_all``'s report: ours vs the anchor, same run."""

  name: str  # what is compared, e.g. "quantized_adam step vs optax.adam"
  ratio: float  # ours / anchor
  note: str = ""
  higher_is_better: bool = False  # False: a time ratio (> 1 slower); True: a throughput ratio


def seed_mesh(axis: str = "seeds") -> jax.sharding.Mesh:
  """A 1-D mesh over every device (all hosts after ``jax.distributed.initialize()``)."""
  return jax.sharding.Mesh(np.asarray(jax.devices()), (axis,))


def shard_seeds(tree: Any, axis: str = "seeds") -> Any:
  """Places the leading (seed or batch) axis of each array leaf across all devices.

  The computation that consumes the result (a jitted, vmapped-over-seeds function)
  is then partitioned by XLA so each device runs its share of the seeds. Leaves
  whose leading size does not divide by the device count, and scalars, are
  replicated instead, with a warning: correct, just not parallel (pick ``--seeds``
  as a multiple of the device count). On one device this is a plain placement
  and changes nothing. Pass only per-seed leaves: a shared array whose first
  dimension happens to divide by the device count would be split too.

  Example::

    keys = shard_seeds(jax.random.split(jax.random.key(0), num_seeds))
    out = jax.jit(jax.vmap(train_one_seed))(keys)   # seeds split over devices

  Multi-host: after ``jax.distributed.initialize()`` the mesh spans every host;
  outputs then span devices other processes own and must be gathered
  (``jax.experimental.multihost_utils.process_allgather``) before ``np.asarray``,
  which the experiment scripts do not do yet.
  """
  mesh = seed_mesh(axis)
  n = mesh.size
  split = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  uneven = []

  def place(x):
    if not hasattr(x, "shape"):
      return x
    even = x.ndim >= 1 and x.shape[0] % n == 0
    if not even and x.ndim >= 1 and n > 1:
      uneven.append(x.shape[0])
    return jax.device_put(x, split if even else replicated)

  placed = jax.tree.map(place, tree)
  if uneven:
    warnings.warn(f"shard_seeds: leading sizes {sorted(set(uneven))} do not divide by the "
                  f"{n} devices, so those inputs are replicated (each device runs all of "
                  f"them); use a multiple of {n} seeds to split them", stacklevel=2)
  return placed
