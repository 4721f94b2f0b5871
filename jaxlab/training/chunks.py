"""Chunked training with orbax checkpoints: run, save after every chunk, resume after the last one.

Both trainers (:mod:`jaxlab.rl.train`, offline; :mod:`jaxlab.rl.hrl`, online)
run a list of jitted chunks over a carry pytree. :func:`run_chunks` saves the
carry's leaves, the history of per-chunk records and a counter after every
chunk, and on a later call with the same directory restores them into the
carry's structure and continues with the next chunk, so an interrupted run
ends exactly where an uninterrupted one does.

A checkpoint also holds the run's fingerprint: the caller's description of the
run (configs, chunk plan, keys, data) plus the number of chunks and the carry's
structure, shapes and dtypes. Resuming refuses a checkpoint whose fingerprint
differs (naming the first field that does) instead of returning another run's
result; an unreadable newest checkpoint falls back to the previous intact one,
with a warning.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
import zlib
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
               desc: str = "train", fingerprint: dict[str, Any] | None = None,
               ) -> tuple[Any, list[dict[str, np.ndarray]]]:
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
    fingerprint: what else defines the run (JSON-able after ``str`` of odd
      values: configs, the chunk plan, the keys, ...); saved with every
      checkpoint and compared on resume, together with ``num_chunks`` and the
      carry's structure, shapes and dtypes.

  Returns:
    The final carry and the list of records (restored ones included).

  Raises:
    ValueError: resuming from a checkpoint of another run (the message names
      the first differing field), or no checkpoint in the directory is readable.
  """
  history: list[dict[str, np.ndarray]] = []
  start, counter, manager = 0, 0, None
  if checkpoint_dir is not None:
    fp = run_fingerprint(carry, num_chunks, fingerprint)
    manager = ocp.CheckpointManager(os.path.abspath(checkpoint_dir),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))
    if manager.latest_step() is not None:
      carry, history, start, counter = _restore(manager, carry, fp)
  ran = 0
  for i in tqdm(range(start, num_chunks), desc=desc, initial=start, total=num_chunks,
                leave=False):
    carry, record, counter = run_chunk(i, carry, counter)
    if record is not None:
      history.append({k: np.asarray(v) for k, v in record.items()})
    if manager is not None:
      _save(manager, i + 1, carry, history, counter, fp)
    ran += 1
    if stop_after is not None and ran >= stop_after:
      break
  if manager is not None:
    manager.wait_until_finished()
    manager.close()
  return carry, history


def _jsonable(value: Any) -> Any:
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return {"__class__": type(value).__name__,
            **{f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}}
  if isinstance(value, dict):
    return {str(k): _jsonable(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_jsonable(v) for v in value]
  if isinstance(value, (jax.Array, np.ndarray, np.generic)):
    arr = np.asarray(jax.random.key_data(value) if jax.dtypes.issubdtype(
        value.dtype, jax.dtypes.prng_key) else value)
    return arr.tolist() if arr.size <= 64 else {"shape": list(arr.shape), "dtype": str(arr.dtype),
                                                "crc32": _crc32(arr)}
  if value is None or isinstance(value, (bool, int, float, str)):
    return value
  return repr(value)


def _crc32(arr: np.ndarray) -> int:
  return zlib.crc32(np.ascontiguousarray(arr).tobytes())


def run_fingerprint(carry: Any, num_chunks: int, extra: dict[str, Any] | None) -> dict[str, Any]:
  """The JSON-able fingerprint a checkpoint is saved with (see :func:`run_chunks`)."""
  leaves, treedef = jax.tree.flatten(carry)
  fp = {"run": _jsonable(extra or {}), "num_chunks": int(num_chunks),
        "carry_structure": str(treedef),
        "carry_leaves": [f"{jnp.dtype(x.dtype)}{list(np.shape(x))}" for x in leaves]}
  return json.loads(json.dumps(fp))  # as it reads back


def _differences(saved: Any, now: Any, path: str = "", out: list | None = None,
                 limit: int = 3) -> list[str]:
  """Up to ``limit`` fields where two fingerprints differ, in ``now``'s order."""
  out = [] if out is None else out
  if len(out) >= limit:
    return out
  if isinstance(saved, dict) and isinstance(now, dict):
    for k in [*now, *(k for k in saved if k not in now)]:
      sub = f"{path}.{k}" if path else k
      if k not in saved or k not in now:
        out.append(f"{sub} is {saved.get(k, '<absent>')!r} there, "
                   f"{now.get(k, '<absent>')!r} now")
      else:
        _differences(saved[k], now[k], sub, out, limit)
      if len(out) >= limit:
        break
    return out
  if isinstance(saved, list) and isinstance(now, list) and len(saved) == len(now):
    for i, (a, b) in enumerate(zip(saved, now, strict=True)):
      _differences(a, b, f"{path}[{i}]", out, limit)
      if len(out) >= limit:
        break
    return out
  if saved != now:
    show = lambda v: (s if len(s := repr(v)) <= 120 else s[:117] + "...")
    out.append(f"{path} is {show(saved)} there, {show(now)} now")
  return out


def _save(manager, step: int, carry: Any, history: list, counter: int,
          fingerprint: dict[str, Any]) -> None:
  tree = {"leaves": [np.asarray(x) for x in jax.tree.leaves(carry)], "history": history,
          "counter": np.int64(counter),
          "fingerprint": np.frombuffer(json.dumps(fingerprint).encode(), np.uint8)}
  manager.save(step, args=ocp.args.StandardSave(tree))
  manager.wait_until_finished()


def _restore(manager, template: Any, fingerprint: dict[str, Any]):
  directory = manager.directory
  steps = sorted(manager.all_steps(), reverse=True)
  tree, step, failures = None, None, []
  for step in steps:
    try:
      tree = manager.restore(step, args=ocp.args.StandardRestore())
      break
    except Exception as err:  # noqa: BLE001 (orbax raises many kinds on a damaged step)
      failures.append((step, err))
  if tree is None:
    raise ValueError(f"no readable checkpoint in {directory} (steps {steps}: "
                     f"{failures[0][1]!r}); delete it or use another checkpoint_dir")
  if failures:
    warnings.warn(
        f"checkpoint step(s) {[s for s, _ in failures]} in {directory} are unreadable "
        f"({failures[0][1]!r}); resuming from the previous intact step {step}", stacklevel=3)
    for bad, _ in failures:  # the resumed run saves these steps again
      manager.delete(bad)
  saved = tree.get("fingerprint")
  if saved is None:
    warnings.warn(f"checkpoint step {step} in {directory} has no run fingerprint (an older "
                  "version wrote it); only its shapes are checked", stacklevel=3)
    saved_fp = {k: fingerprint[k] for k in ("run", "num_chunks", "carry_structure")}
    saved_fp["carry_leaves"] = [f"{jnp.dtype(np.asarray(x).dtype)}{list(np.shape(x))}"
                                for x in tree["leaves"]]
  else:
    saved_fp = json.loads(np.asarray(saved, np.uint8).tobytes().decode())
  diff = _differences(saved_fp, fingerprint)
  if diff:
    raise ValueError(f"checkpoint_dir {directory} holds another run: {'; '.join(diff)}; resume "
                     "with the same settings, or use another checkpoint_dir (or delete it)")
  leaves, treedef = jax.tree.flatten(template)
  restored = [jnp.asarray(x, dtype=t.dtype) for x, t in zip(tree["leaves"], leaves, strict=True)]
  history = [{k: np.asarray(v) for k, v in h.items()} for h in tree.get("history", [])]
  return jax.tree.unflatten(treedef, restored), history, int(step), int(tree["counter"])
