"""Timing helpers of the benchmark scripts (``experiments/bench_*.py``).

:func:`time_interleaved` times jitted functions in interleaved rounds, so a ratio to the
anchor is taken within a round; :func:`trace_self_times` reads per-op self times from a
``jax.profiler`` trace.
"""

from __future__ import annotations

import collections
import time
from typing import Any

import jax


def trace_self_times(events: list[dict], key: Any = None
                     ) -> tuple[collections.Counter, collections.Counter]:
  """Self time in us (own duration less the events nested in it on its thread) and count
  per ``key(event)`` (default the event's name; events whose key is None are skipped) of a
  ``jax.profiler`` trace's complete events (``"ph": "X"``)."""
  key = (lambda e: e["name"]) if key is None else key
  self_us, count = collections.Counter(), collections.Counter()
  threads = collections.defaultdict(list)
  for e in events:
    if e.get("ph") == "X":
      threads[(e["pid"], e["tid"])].append(e)
  for evs in threads.values():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    stack, child = [], collections.Counter()
    for i, e in enumerate(evs):
      while stack and e["ts"] >= evs[stack[-1]]["ts"] + evs[stack[-1]]["dur"]:
        stack.pop()
      if stack:
        child[stack[-1]] += e["dur"]
      stack.append(i)
    for i, e in enumerate(evs):
      name = key(e)
      if name is not None:
        self_us[name] += e["dur"] - child[i]
        count[name] += 1
  return self_us, count


def time_interleaved(cases: dict, repeats: int, inner: int) -> dict[str, list[float]]:
  """Seconds per call of each jitted ``fn(*args) -> args``, one value per round.

  ``cases`` maps a name to ``(fn, args)``. Each of the ``repeats`` rounds times
  every case once (``inner`` calls), so the rounds interleave the cases and slow
  drift of a shared machine hits all of them alike; a ratio to the anchor is then
  taken within a round (paired). Everything is compiled first.
  """
  for fn, args in cases.values():
    jax.block_until_ready(fn(*args))
  times = {name: [] for name in cases}
  for _ in range(repeats):
    for name, (fn, args) in cases.items():
      start = time.perf_counter()
      state = args
      for _ in range(inner):
        state = fn(*state)
      jax.block_until_ready(state)
      times[name].append((time.perf_counter() - start) / inner)
  return times
