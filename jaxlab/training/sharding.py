r"""Data-parallel and FSDP-style placement with JAX's own sharding (``jax.sharding``).

A training step written for one device runs unchanged on a mesh: the batch is
split along its leading axis over the mesh's ``"data"`` axis, the parameters are
replicated (data parallel) or each split along one axis (``fsdp=True``: every
device stores a slice, XLA gathers it for the forward pass and reduce-scatters the
gradient), and ``jax.jit`` partitions the step from those placements (GSPMD). The
optimizer state is placed like its parameters (:func:`place_train_state`).

Seeds: :func:`shard_seeds` places the leading (seed) axis of a pytree on a 1-D mesh over
every device (:func:`seed_mesh`), so a jitted, vmapped-over-seeds function runs each device's
share of the seeds.

Multi-host: after ``jax.distributed.initialize()`` :func:`data_mesh` spans every
process's devices; each process then feeds its own share of the batch
(``jax.make_array_from_process_local_data``) instead of :func:`shard_batch`.

Example:
  >>> mesh = data_mesh()                                   # all local devices
  >>> params, opt_state = place_train_state(mesh, net.params, optimizer, fsdp=True)
  >>> step = jax.jit(train_step)                           # the single-device step
  >>> params, opt_state, loss = step(params, opt_state, shard_batch(mesh, tokens))

References:
  Xu et al., "GSPMD: General and Scalable Parallelization for ML Computation Graphs",
  arXiv:2105.04663, 2021. Rajbhandari et al., "ZeRO", arXiv:1910.02054, 2020 (FSDP).
"""

from __future__ import annotations

import warnings
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "data"


def data_mesh(num_devices: int | None = None, axis: str = AXIS) -> Mesh:
  """A 1-D mesh over the first ``num_devices`` devices (default: all)."""
  devices = jax.devices()
  n = len(devices) if num_devices is None else num_devices
  if not isinstance(n, int) or not 1 <= n <= len(devices):
    raise ValueError(f"num_devices must be an int in [1, {len(devices)}], got {num_devices!r}")
  return Mesh(np.array(devices[:n]), (axis,))


def shard_batch(mesh: Mesh, batch: Any, axis: str = AXIS) -> Any:
  """Every leaf split along its leading axis over ``axis`` (sizes must divide)."""
  n = mesh.shape[axis]
  for leaf in jax.tree.leaves(batch):
    if np.ndim(leaf) == 0 or np.shape(leaf)[0] % n:
      raise ValueError(f"batch leaves need a leading axis divisible by the {n} devices of "
                       f"mesh axis {axis!r}, got shape {np.shape(leaf)}")
  return jax.device_put(batch, NamedSharding(mesh, PartitionSpec(axis)))


def param_shardings(mesh: Mesh, params: Any, fsdp: bool = False, axis: str = AXIS,
                    min_size: int = 1024) -> Any:
  """Per-leaf :class:`NamedSharding`: replicated, or with ``fsdp`` split along the largest
  axis that the device count divides, for leaves of at least ``min_size`` elements
  (small leaves such as biases and norms stay replicated)."""
  n = mesh.shape[axis]

  def one(leaf):
    shape = np.shape(leaf)
    spec = [None] * len(shape)
    if fsdp and n > 1 and np.prod(shape, dtype=np.int64) >= min_size:
      divisible = [i for i, s in enumerate(shape) if s % n == 0]
      if divisible:
        spec[max(divisible, key=lambda i: shape[i])] = axis
    return NamedSharding(mesh, PartitionSpec(*spec))

  return jax.tree.map(one, params)


def place_train_state(mesh: Mesh, params: Any, optimizer: optax.GradientTransformation,
                      fsdp: bool = False, axis: str = AXIS) -> tuple[Any, Any]:
  """Parameters placed by :func:`param_shardings` and the optimizer state initialized on
  them: a state leaf shaped like a parameter (Adam's moments) is placed like it (the
  rule depends on the shape only, so equal shapes agree), any other leaf replicated."""
  shardings = param_shardings(mesh, params, fsdp, axis)
  params = jax.device_put(params, shardings)
  by_shape = {np.shape(p): s for p, s in zip(jax.tree.leaves(params),
                                              jax.tree.leaves(shardings), strict=True)}
  replicated = NamedSharding(mesh, PartitionSpec())
  state_shapes = jax.eval_shape(optimizer.init, params)
  out = jax.tree.map(lambda x: by_shape.get(x.shape, replicated), state_shapes)
  return params, jax.jit(optimizer.init, out_shardings=out)(params)


def seed_mesh(axis: str = "seeds") -> jax.sharding.Mesh:
  """A 1-D mesh over every device (all hosts after ``jax.distributed.initialize()``)."""
  return jax.sharding.Mesh(np.asarray(jax.devices()), (axis,))


def shard_seeds(tree: Any, axis: str = "seeds") -> Any:
  """Places the leading (seed or batch) axis of each array leaf across all devices.

  The computation that consumes the result (a jitted, vmapped-over-seeds function)
  is then partitioned by XLA so each device runs its share of the seeds. Leaves
  whose leading size does not divide by the device count, and scalars, are
  replicated instead, with a warning: correct, just not parallel (pick ``--seeds``
  as a multiple of the device count). On one device the tree is returned
  unchanged. Pass only per-seed leaves: a shared array whose first
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
  if n == 1:
    # nothing to split; left as it is, because a committed placement is part of a compiled
    # program's identity, and the same function on uncommitted inputs elsewhere (a notebook's
    # demo, a test) would compile a second time
    return tree
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
