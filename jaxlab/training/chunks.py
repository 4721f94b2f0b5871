"""Chunked training with orbax checkpoints: run, save after every chunk, resume after the last one.

Both trainers (:mod:`jaxlab.rl.train`, offline; :mod:`jaxlab.rl.hrl`, online)
run a list of jitted chunks over a carry pytree. :func:`run_chunks` saves the
carry's leaves, the history of per-chunk records and a counter after every
chunk, and on a later call with the same directory restores them into the
carry's structure and continues with the next chunk, so an interrupted run
ends exactly where an uninterrupted one does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from tqdm.auto import tqdm

ChunkFn = Callable[[int, Any, int], tuple[Any, dict[str, np.ndarray] | None, int]]


def run_chunks(carry: Any, num_chunks: int, run_chunk: ChunkFn, *,
               checkpoint_dir: str | None = None, stop_after: int | None = None,
               desc: str = "train") -> tuple[Any, list[dict[str, np.ndarray]]]:
  """Runs ``run_chunk(i, carry, counter) -> (carry, record or None, counter)`` for each chunk.

  Args:
    carry: the initial carry (also the template a checkpoint is restored into).
    num_chunks: number of chunks in the whole run.
    run_chunk: runs chunk ``i``; ``counter`` is a caller-defined integer
      (steps done) that is saved and restored with the carry.
    checkpoint_dir: orbax directory; ``None`` disables checkpointing.
    stop_after: return after this many chunks of this call (simulates an
      interruption).
    desc: progress-bar label.

  Returns:
    The final carry and the list of records (restored ones included).
  """
  history: list[dict[str, np.ndarray]] = []
  start, counter, manager = 0, 0, None
  if checkpoint_dir is not None:
    manager = ocp.CheckpointManager(os.path.abspath(checkpoint_dir),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))
    if manager.latest_step() is not None:
      carry, history, start, counter = _restore(manager, carry)
  ran = 0
  for i in tqdm(range(start, num_chunks), desc=desc, initial=start, total=num_chunks,
                leave=False):
    carry, record, counter = run_chunk(i, carry, counter)
    if record is not None:
      history.append({k: np.asarray(v) for k, v in record.items()})
    if manager is not None:
      _save(manager, i + 1, carry, history, counter)
    ran += 1
    if stop_after is not None and ran >= stop_after:
      break
  if manager is not None:
    manager.wait_until_finished()
    manager.close()
  return carry, history


def _save(manager, step: int, carry: Any, history: list, counter: int) -> None:
  tree = {"leaves": [np.asarray(x) for x in jax.tree.leaves(carry)], "history": history,
          "counter": np.int64(counter)}
  manager.save(step, args=ocp.args.StandardSave(tree))
  manager.wait_until_finished()


def _restore(manager, template: Any):
  step = manager.latest_step()
  tree = manager.restore(step, args=ocp.args.StandardRestore())
  leaves, treedef = jax.tree.flatten(template)
  restored = [jnp.asarray(x, dtype=t.dtype) for x, t in zip(tree["leaves"], leaves, strict=True)]
  history = [{k: np.asarray(v) for k, v in h.items()} for h in tree.get("history", [])]
  return jax.tree.unflatten(treedef, restored), history, int(step), int(tree["counter"])
