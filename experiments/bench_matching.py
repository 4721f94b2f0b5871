"""Timing of incremental matching against its anchors, in one run.

    python -m experiments.bench_matching [--quick] [--n N ...] [--out DIR]
    python -m experiments.bench_matching --section cpp [--quick] [--cpp-n N ...] [--out DIR]
    python -m experiments.bench_matching --section batch [--quick] [--batch-n N ...] [--out DIR]

Section ``anchors`` (the default): uniform 2-D instance, all n insertions:
``exact`` (jitted, one scan) against the same step in plain numpy
(``jaxlab.matching.incremental_exact_numpy``) and against one
``scipy.optimize.linear_sum_assignment`` solve of the final problem;
``push_relabel`` (sequential) and ``greedy`` for scale. Prints seconds and
ratios; compilation is excluded (a throwaway run compiles first). Targets
(issue 3): exact at least as fast as the numpy step, and at n = 10,000 faster
than one scipy solve.

Section ``cpp`` (``--section cpp``, or ``all`` for both): push-relabel
``insert_many`` against the official C++ code's sequential algorithm, on the
same uniform instances (``--cpp-n``, ``--cpp-seeds`` seeds), all n arrivals,
median of ``--cpp-repeats`` runs, compilation excluded on both sides. The C++
side is ``experiments/cpp/push_relabel.cpp`` (our own program with the official
code's data structures and per-arrival work, no exact tail; compiled here with
``$CXX`` or ``c++`` and ``--cpp-opt``, default -O2; the official README builds
without -O, i.e. -O0), in its "official" mode and a "flat" mode (the same
trajectory on flat arrays). Ours runs with its default options and with the C++
options (``omega_init="one"``, ``cost_dtype="float64"``, ``top_level="raise"``:
the same trajectory as the C++, checked here). Target (issue 16): ours at least
as fast as the official C++. Reported with cost / OPT for each, and a profile of
where our time goes: pushes / relabels / level moves / re-insertions (the C++
counters; ours counts steps), time per step, a per-step model ``a + b n`` fitted
over ``--cpp-probe-n`` sizes (``a``: fixed cost of one step, ``b``: cost per
server), the host share (input checks and dispatch before the compiled loop
runs), and an op-level trace of one window of late arrivals (``jax.profiler``;
trace overhead inflates small ops, so its shares are indicative, its per-step
counts and bytes exact). Without a C++ compiler the section records why it was
skipped. Writes ``results.json`` and ``cpp.csv`` (one row per instance).

Section ``batch`` (``--section batch``): push-relabel's parallel rounds
(``insert_batch``) against its sequential algorithm (``insert_many``) on the
same instances (``--batch-families``, ``--batch-n``, ``--batch-seeds`` seeds),
requests arriving in ``BATCH_CHUNKS`` chunks of n/20 (each chunk one batch; the
sequential run gets the same chunks, so both pay the same host calls), median
of ``--batch-repeats`` interleaved runs each, compilation excluded. Records the
wall times and their ratio (target, issue 16: batch within 2x of sequential on
CPU), the parallel rounds, the requests placed one at a time (fallbacks: only
the exact tail, off here), the omega doublings and cost / OPT of both. With
``--batch-sweep`` the same comparison runs again on the first family and size
(seed 0) at each batch width of ``--batch-widths``: a round's work and the
rounds' count both depend on the width. Writes ``batch.csv`` (one row per
instance) besides ``results.json``.
"""

from __future__ import annotations

import collections
import csv
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np

from experiments import cpp
from experiments.cli import ExperimentCLI
from experiments.records import save_json
from experiments.reporting import Ratio
from experiments.timing import trace_self_times
from jaxlab import matching as M
from jaxlab.data.matching_instances import FAMILIES, uniform
from jaxlab.data.matching_instances import make as make_instance


def _time_jax(algorithm: str, servers, requests, **kw) -> tuple[float, float]:
  warm = M.init(servers, algorithm=algorithm, **kw)
  jax.block_until_ready(M.insert_many(warm, requests).count)  # compile
  state = M.init(servers, algorithm=algorithm, **kw)
  start = time.perf_counter()
  state = M.insert_many(state, requests)
  jax.block_until_ready(state.count)
  return time.perf_counter() - start, float(M.cost(state))


def bench(n: int, seed: int, numpy_anchor: bool) -> dict:
  servers, requests, _ = uniform(n, seed)
  row = {"n": n, "seed": seed}
  start = time.perf_counter()
  opt = M.optimal_cost(requests, servers)
  row["scipy_one_solve_s"] = time.perf_counter() - start
  for alg in ("exact", "push_relabel", "greedy"):
    t, c = _time_jax(alg, servers, requests)
    row[f"{alg}_s"], row[f"{alg}_ratio"] = t, c / opt
  if numpy_anchor:
    start = time.perf_counter()
    M.incremental_exact_numpy(requests, servers)
    row["numpy_exact_s"] = time.perf_counter() - start
  return row


# ---------------------------------------------------------------------------------------------
# Section "cpp": push-relabel against the official C++ code's sequential algorithm.

CPP_OPTIONS = dict(omega_init="one", cost_dtype="float64", top_level="raise")
# Ours: name -> (push-relabel options, 64-bit JAX).
VARIANTS = {"default": ({}, False), "cpp_options": (CPP_OPTIONS, True)}
CPP_MODES = ("official", "flat")


def _step_count(counters: dict) -> int:
  """Pushes + relabels + level moves: what ours counts as steps (``extra.steps``)."""
  return sum(counters[k] for k in ("pushes_free", "pushes_matched", "relabels", "moves_up"))


def ours_runner(servers, requests, options: dict, x64: bool):
  """Compiles ``insert_many`` of every request (a throwaway run); returns a function that
  times one run from an empty state: ``(seconds, host seconds, summary)``.

  Host seconds: until ``insert_many`` returns (input checks and dispatch; the compiled
  loop runs asynchronously after it); seconds: until the result is ready.
  """
  dtype = np.float64 if x64 else np.float32
  s, r = servers.astype(dtype), requests.astype(dtype)

  def once():
    with jax.enable_x64(x64):
      state = jax.block_until_ready(M.init(s, **options))
      start = time.perf_counter()
      state = M.insert_many(state, r)
      host = time.perf_counter() - start
      jax.block_until_ready(state.count)
      total = time.perf_counter() - start
      return total, host, {
          "cost": float(M.cost(state)), "steps": int(state.extra.steps),
          "restarts": int(state.extra.restarts), "inserted": M.num_inserted(state),
          "overflowed": bool(state.extra.overflowed), "server_of": M.assignment(state)}

  once()  # compile
  return once


def _summary(runs) -> dict:
  """Median seconds (and every run) of ``[(seconds, host, summary), ...]``; the summary
  of the last run (every run computes the same state)."""
  return {"s": float(np.median([t for t, _, _ in runs])), "runs_s": [t for t, _, _ in runs],
          "host_s": float(np.median([h for _, h, _ in runs])), **runs[-1][2]}


def time_ours(servers, requests, options: dict, x64: bool, repeats: int) -> dict:
  """Median of ``repeats`` timed runs of ``insert_many`` (compiled first)."""
  once = ours_runner(servers, requests, options, x64)
  return _summary([once() for _ in range(repeats)])


def bench_cpp(n: int, seed: int, repeats: int, opt: str) -> dict:
  """One uniform instance: the C++ program (both modes) and ours (both variants), their
  runs interleaved (C++ official, C++ flat, ours default, ours C++ options, again ...) so
  that load from other processes falls on all alike; median of ``repeats`` each."""
  servers, requests, _ = uniform(n, seed)
  opt_cost = M.optimal_cost(requests, servers)
  row = {"n": n, "seed": seed, "opt_cost": opt_cost}
  runners = {name: ours_runner(servers, requests, options, x64)
             for name, (options, x64) in VARIANTS.items()}
  cpp_runs = {mode: [] for mode in CPP_MODES}
  ours_runs = {name: [] for name in VARIANTS}
  for _ in range(repeats):
    for mode in CPP_MODES:
      out = cpp.run(servers, requests, mode=mode, opt=opt)
      if out.status != "ok":
        raise RuntimeError(f"the C++ program stopped at arrival {out.overflow_arrival} "
                           "(a dual passed the top level, where the official code exits)")
      cpp_runs[mode].append(out)
    for name, once in runners.items():
      ours_runs[name].append(once())
  for mode, outs in cpp_runs.items():
    row[f"cpp_{mode}_runs_s"] = [o.seconds[0] for o in outs]
    row[f"cpp_{mode}_s"] = float(np.median(row[f"cpp_{mode}_runs_s"]))
  c = cpp_runs["official"][-1]
  if not np.array_equal(c.server_of, cpp_runs["flat"][-1].server_of):
    raise RuntimeError("the C++ program's two modes disagree (a bug in push_relabel.cpp)")
  arrivals = c.arrival_seconds
  row.update({
      "cpp_ratio": c.cost / opt_cost, "cpp_omega": c.omega, "cpp_restarts": c.restarts,
      "cpp_steps": _step_count(c.counters), **{f"cpp_{k}": v for k, v in c.counters.items()},
      # The official run hands the last 50 arrivals to an exact solver: its time compares
      # with this C++ time up to n - 50 arrivals (plus that solver's).
      "cpp_official_s_before_last_50": float(arrivals[n - 51]) if n > 50 else None,
      "cpp_last_10pct_share": float(1 - arrivals[int(0.9 * n) - 1] / arrivals[-1]),
  })
  for name, runs in ours_runs.items():
    ours = _summary(runs)
    row.update({f"ours_{name}_{k}": v for k, v in ours.items() if k != "server_of"})
    row[f"ours_{name}_ratio"] = ours["cost"] / opt_cost
    if name == "cpp_options":  # the same trajectory as the C++: same matching, same steps
      row["cpp_options_same_matching"] = bool(np.array_equal(ours["server_of"], c.server_of))
      row["cpp_options_same_steps"] = ours["steps"] == row["cpp_steps"]
  return row


def _fit_step(sizes, per_step) -> dict:
  """Least squares ``per_step = a + b n`` (``a`` in microseconds, ``b`` in ns per server;
  ``None`` with fewer than two distinct sizes)."""
  if len(set(sizes)) < 2:
    return {"fixed_us": None, "per_server_ns": None}
  b, a = np.polyfit(np.asarray(sizes, np.float64), np.asarray(per_step, np.float64), 1)
  return {"fixed_us": 1e6 * float(a), "per_server_ns": 1e9 * float(b)}


def step_model(probe_sizes, main: dict, repeats: int, opt: str) -> dict:
  """Seconds per step of each implementation at the probe sizes and at ``main["n"]``
  (seed 0), and the fit ``a + b n`` per implementation."""
  points = {}
  for m in probe_sizes:
    servers, requests, _ = uniform(m, 0)
    for mode in CPP_MODES:
      out = cpp.run(servers, requests, repeats=max(repeats, 5), mode=mode, opt=opt)
      points.setdefault(f"cpp_{mode}", []).append(
          (m, float(np.median(out.seconds)) / _step_count(out.counters)))
    for name, (options, x64) in VARIANTS.items():
      ours = time_ours(servers, requests, options, x64, max(repeats, 5))
      points.setdefault(f"ours_{name}", []).append((m, ours["s"] / ours["steps"]))
  n = main["n"]
  for mode in CPP_MODES:
    points[f"cpp_{mode}"].append((n, main[f"cpp_{mode}_s"] / main["cpp_steps"]))
  for name in VARIANTS:
    points[f"ours_{name}"].append((n, main[f"ours_{name}_s"] / main[f"ours_{name}_steps"]))
  return {k: {"n": [p[0] for p in v], "s_per_step": [p[1] for p in v],
              **_fit_step([p[0] for p in v], [p[1] for p in v])} for k, v in points.items()}


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
          "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}


def _hlo_ops(compiled_text: str) -> dict[str, tuple[str, str]]:
  """HLO instruction name -> (result shape, opcode) of a compiled module's text; shapes
  without layout and with ``x`` between dimensions (``s32[7x500]``)."""
  ops = {}
  for line in compiled_text.splitlines():
    m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (\S+) ([\w\-]+)\(", line)
    if m:
      ops[m.group(1)] = (m.group(2).split("{")[0].replace(",", "x"), m.group(3))
  return ops


def _elements(shape: str) -> int:
  m = re.match(r"\w+\[([\dx]*)\]", shape)
  return int(np.prod([int(d) for d in m.group(1).split("x") if d])) if m else 0


def _shape_bytes(shape: str) -> int:
  return _BYTES.get(shape.split("[")[0], 0) * _elements(shape)


def _category(name: str, shape: str, opcode: str, n: int) -> str:
  if opcode == "copy":
    return "copies"
  if "reduce" in name:
    return "reductions"
  return "n-wide ops" if _elements(shape) >= n else "small ops (< n elements)"


def _window(start, requests, first: int, budget: int):
  """``(state, first, last)``: from ``start`` (``first`` arrivals in), the arrivals
  ``first..last-1`` whose steps first add up to ``budget``; an arrival with more than
  5 x ``budget`` steps alone (an omega doubling re-inserts everything: too many events
  for one trace) is inserted untraced and the window starts after it."""
  state, begin, used = start, first, 0
  for i in range(first, len(requests)):
    new = M.insert(state, requests[i])
    steps = int(new.extra.steps) - int(state.extra.steps)
    if steps > 5 * budget:
      start, begin, used = new, i + 1, 0
    else:
      used += steps
    state = new
    if used >= budget:
      return start, begin, i + 1
  return start, begin, len(requests)


def trace_window(n: int, options: dict, x64: bool, budget_steps: int, top: int = 8) -> dict:
  """An op-level trace of ours on late arrivals (seed 0, from 0.9 n on, one ``insert`` each,
  at least ``budget_steps`` steps, see :func:`_window`): self time per compiled op by
  category, executions and bytes written per step, and the traced time against the same
  window untraced."""
  from jaxlab.matching import api  # noqa: PLC0415 (the compiled insertion's HLO op names)

  servers, requests, _ = uniform(n, 0)
  with jax.enable_x64(x64):
    dtype = np.float64 if x64 else np.float32
    s, r = servers.astype(dtype), requests.astype(dtype)
    first = int(0.9 * n)
    after = jax.block_until_ready(M.insert_many(M.init(s, **options), r[:first]))
    jax.block_until_ready(M.insert(after, r[first]).count)  # compile
    start, first, last = _window(after, r, first, budget_steps)
    if last == first:
      return {"n": n, "skipped": "no arrival after 0.9 n fits the step budget"}

    def replay():
      state, t0 = start, time.perf_counter()
      for i in range(first, last):
        state = M.insert(state, r[i])
      jax.block_until_ready(state.count)
      return state, time.perf_counter() - t0

    state, untraced = replay()
    steps = int(state.extra.steps) - int(start.extra.steps)
    folder = tempfile.mkdtemp(prefix="jaxlab-trace-")
    with jax.profiler.trace(folder, create_perfetto_trace=True):
      _, traced = replay()
    ops = _hlo_ops(api._insert.lower(start, r[first]).compile().as_text())
  files = glob.glob(os.path.join(folder, "**", "*perfetto_trace.json.gz"), recursive=True)
  with gzip.open(files[0]) as f:
    events = json.load(f)
  shutil.rmtree(folder, ignore_errors=True)
  events = events["traceEvents"] if isinstance(events, dict) else events
  self_us, count = trace_self_times(events)
  control = sum(v for k, v in self_us.items()
                if k == "ThunkExecutor::Execute" or k.split(".")[0] in ("while", "cond"))
  leaf = {k: v for k, v in self_us.items() if k in ops and k.split(".")[0] not in ("while", "cond")}
  device = control + sum(leaf.values())
  categories = {"loop control": {"share": control / device, "per_step": None,
                                 "bytes_per_step": None}}
  for k, v in leaf.items():
    c = categories.setdefault(_category(k, *ops[k], n),
                              {"share": 0.0, "per_step": 0.0, "bytes_per_step": 0.0})
    c["share"] += v / device
    c["per_step"] += count[k] / steps
    c["bytes_per_step"] += count[k] * _shape_bytes(ops[k][0]) / steps
  copies = collections.Counter()
  for k in leaf:
    if ops[k][1] == "copy":
      copies[ops[k][0]] += count[k] / steps
  rows = [{"op": k, "shape": ops[k][0], "opcode": ops[k][1], "per_step": count[k] / steps,
           "share": v / device} for k, v in sorted(leaf.items(), key=lambda kv: -kv[1])[:top]]
  return {"n": n, "arrivals": [first, last], "steps": steps, "untraced_s": untraced,
          "traced_s": traced, "device_traced_s": device / 1e6,
          "ops_per_step": sum(count[k] for k in leaf) / steps, "categories": categories,
          "copies_per_step_by_shape": dict(copies.most_common()), "top_ops": rows}


def run_cpp_section(cfg: dict) -> dict:
  """Every (n, seed) of the C++ comparison, the step model and the traces."""
  cxx = cpp.find_compiler()
  if cxx is None:
    return {"skipped": "no C++ compiler found ($CXX, c++, g++ or clang++), or no source "
                       f"{cpp.SOURCE}: the C++ column needs both; nothing timed"}
  cpp.build(cfg["cpp_opt"], cxx)  # compiled before any timing
  out = {"compiler": cpp.compiler_version(cxx), "flags": " ".join([cfg["cpp_opt"],
                                                                     *cpp.BASE_FLAGS]),
         "program": os.path.relpath(cpp.SOURCE, os.path.dirname(os.path.dirname(__file__))),
         "repeats": cfg["cpp_repeats"], "rows": []}
  for n in cfg["cpp_n"]:
    for seed in range(cfg["cpp_seeds"]):
      out["rows"].append(bench_cpp(n, seed, cfg["cpp_repeats"], cfg["cpp_opt"]))
  main = max((r for r in out["rows"] if r["seed"] == 0), key=lambda r: r["n"])
  out["step_model"] = step_model(cfg["cpp_probe_n"], main, cfg["cpp_repeats"], cfg["cpp_opt"])
  if cfg["trace_steps"] > 0:
    out["trace"] = {name: trace_window(main["n"], options, x64, cfg["trace_steps"])
                    for name, (options, x64) in VARIANTS.items()}
  return out


def print_cpp(section: dict) -> None:
  if "skipped" in section:
    print(f"C++ comparison skipped: {section['skipped']}")
    return
  print(f"C++: {section['compiler']}, {section['flags']}; median of {section['repeats']} runs")
  print(f"{'n':>6s} {'seed':>4s} {'C++ s':>7s} {'flat s':>7s} {'ours s':>7s} {'ours/C++':>8s} "
        f"{'oursC s':>7s} {'oursC/C++':>9s} {'C++/OPT':>7s} {'ours/OPT':>8s} {'same':>5s} "
        f"{'steps C++':>9s} {'steps ours':>10s}")
  for r in section["rows"]:
    print(f"{r['n']:6d} {r['seed']:4d} {r['cpp_official_s']:7.2f} {r['cpp_flat_s']:7.2f} "
          f"{r['ours_default_s']:7.2f} {r['ours_default_s'] / r['cpp_official_s']:8.2f} "
          f"{r['ours_cpp_options_s']:7.2f} "
          f"{r['ours_cpp_options_s'] / r['cpp_official_s']:9.2f} {r['cpp_ratio']:7.3f} "
          f"{r['ours_default_ratio']:8.3f} {str(r['cpp_options_same_matching']):>5s} "
          f"{r['cpp_steps']:9d} {r['ours_default_steps']:10d}")
  print("(oursC: ours with the C++ options, the C++ trajectory; same: its matching equals the "
        "C++ one)")
  for r in section["rows"][:1]:
    c = {k: r[f"cpp_{k}"] for k in cpp.COUNTERS}
    print(f"n = {r['n']}, seed {r['seed']}: {c['placements']} placements for {r['n']} arrivals "
          f"({r['cpp_restarts']} omega doublings), {c['pushes_free']} free pushes, "
          f"{c['pushes_matched']} evictions, {c['relabels']} relabels, {c['moves_up']} level "
          f"moves; a C++ scan visits {c['servers_scanned'] / c['scans'] / r['n']:.0%} of the "
          f"servers (it stops at the first admissible free one; ours always visits all); the "
          f"last 10% of arrivals take {r['cpp_last_10pct_share']:.0%} of the C++ time; host "
          f"share of ours {r['ours_default_host_s'] / r['ours_default_s']:.1%}")
  for name, m in section["step_model"].items():
    pts = ", ".join(f"n={n}: {1e6 * t:.2f}" for n, t in zip(m["n"], m["s_per_step"], strict=True))
    fit = ("" if m["fixed_us"] is None else
           f"; fit {m['fixed_us']:.2f} us + {m['per_server_ns']:.2f} ns x n")
    print(f"  {name:18s} us per step {pts}{fit}")
  for name, t in section.get("trace", {}).items():
    if "skipped" in t:
      print(f"  trace {name}: {t['skipped']}")
      continue
    print(f"  trace {name} (n = {t['n']}, arrivals {t['arrivals'][0]}-{t['arrivals'][1] - 1}, "
          f"{t['steps']} steps; traced {t['traced_s']:.2f} s vs {t['untraced_s']:.2f} s "
          f"untraced): {t['ops_per_step']:.1f} ops per step")
    for cat, c in t["categories"].items():
      extra = ("" if c["per_step"] is None else
               f", {c['per_step']:.1f} per step writing {c['bytes_per_step'] / 1e3:.1f} kB")
      print(f"    {c['share']:5.1%} {cat}{extra}")
    print("    copies per step: " + ", ".join(
        f"{shape} x{k:.2f}" for shape, k in t["copies_per_step_by_shape"].items()))


def write_cpp_csv(path: str, section: dict) -> None:
  """One row per instance: every scalar field of the section's rows."""
  write_rows_csv(path, section["rows"])


# ---------------------------------------------------------------------------------------------
# Section "batch": push-relabel's parallel rounds against its sequential algorithm.

BATCH_CHUNKS = 20  # arrivals in chunks of n / 20, one batch each (as matching_incremental)


def batch_runner(step, servers, requests, metric: str, chunk: int, **options):
  """Compiles ``step`` (``M.insert_batch`` or ``M.insert_many``) on one chunk; returns a
  function that times all chunks from an empty state (``M.init`` with ``options``):
  ``(seconds, state)``."""

  def once(reqs=requests):
    state = jax.block_until_ready(M.init(servers, metric=metric, **options))
    start = time.perf_counter()
    for i in range(0, len(reqs), chunk):
      state = step(state, reqs[i:i + chunk])
    jax.block_until_ready(state.count)
    return time.perf_counter() - start, state

  once(requests[:chunk])  # compile (every chunk has one shape)
  return once


def bench_batch(family: str, n: int, seed: int, repeats: int, chunk: int | None = None,
                batch_relabel: str = "global") -> dict:
  """One instance: batch and sequential runs interleaved, median of ``repeats`` each, arrivals
  in chunks of ``chunk`` (default n / ``BATCH_CHUNKS``); ``batch_relabel``: the rounds'
  relabel rule (``M.init``'s option; the sequential algorithm does not use it)."""
  chunk = chunk or n // BATCH_CHUNKS
  servers, requests, metric = make_instance(family, n, seed)
  opt = M.optimal_cost(requests, servers, metric)
  runners = {"batch": batch_runner(M.insert_batch, servers, requests, metric, chunk,
                                   batch_relabel=batch_relabel),
             "sequential": batch_runner(M.insert_many, servers, requests, metric, chunk)}
  runs = {name: [] for name in runners}
  for _ in range(repeats):
    for name, once in runners.items():
      runs[name].append(once())
  row = {"family": family, "n": n, "seed": seed, "chunk": chunk, "opt_cost": opt}
  for name, got in runs.items():
    state = got[-1][1]  # every run computes the same state
    row[f"{name}_s"] = float(np.median([t for t, _ in got]))
    row[f"{name}_runs_s"] = [t for t, _ in got]
    row[f"{name}_ratio"] = float(M.cost(state)) / opt
    row[f"{name}_restarts"] = int(state.extra.restarts)
    row[f"{name}_steps"] = int(state.extra.steps)
    row[f"{name}_inserted"] = M.num_inserted(state)
  last = runs["batch"][-1][1]
  row["rounds"] = int(last.extra.rounds)  # re-insertions after omega doublings included
  row["fallbacks"] = int(last.extra.fallbacks)
  # Requests gathered by the rounds, each with its slacks to all n servers: the work a
  # sequential step does for one request, so per sequential step it bounds what the batch
  # can gain from faster rounds.
  row["rows_read"] = int(last.extra.rows_read)
  row["rows_per_step"] = row["rows_read"] / max(row["sequential_steps"], 1)
  row["batch_vs_sequential"] = row["batch_s"] / row["sequential_s"]
  return row


def run_batch_section(cfg: dict) -> dict:
  """Every (family, n, seed) of the batch comparison; with ``batch_one_thread`` the same
  comparison again in a child process whose XLA thread pool has one thread
  (:func:`one_thread_section`)."""
  bad = [n for n in cfg["batch_n"] if n % BATCH_CHUNKS or n < BATCH_CHUNKS]
  if bad:
    raise ValueError(f"batch_n must be positive multiples of {BATCH_CHUNKS} (the chunks), "
                     f"got {bad}")
  family, n = cfg["batch_families"][0], cfg["batch_n"][0]
  bad = [w for w in cfg["batch_widths"] if w < 1 or n % w]
  if cfg["batch_sweep"] and bad:
    raise ValueError(f"batch_widths must divide the first batch_n ({n}), got {bad}")
  relabel = cfg["batch_relabel"]
  rows = [bench_batch(family, n, seed, cfg["batch_repeats"], batch_relabel=relabel)
          for family in cfg["batch_families"] for n in cfg["batch_n"]
          for seed in range(cfg["batch_seeds"])]
  section = {"repeats": cfg["batch_repeats"], "chunks": BATCH_CHUNKS, "rows": rows,
             "cores": len(os.sched_getaffinity(0)), "xla_threads": xla_threads(),
             "batch_relabel": relabel}
  if cfg["batch_sweep"]:
    section["sweep"] = [bench_batch(family, n, 0, cfg["batch_repeats"], chunk=w,
                                    batch_relabel=relabel) for w in cfg["batch_widths"]]
  if cfg["batch_one_thread"] and section["xla_threads"] != 1:
    child = one_thread_section(cfg)
    section["one_thread_rows"] = child["rows"]
    section["one_thread_xla_threads"] = child["xla_threads"]  # the child's own reading: 1
    if cfg["batch_sweep"]:
      section["one_thread_sweep"] = child["sweep"]
  return section


def xla_threads() -> int:
  """Threads of XLA's CPU thread pool in this process: ``PJRT_NPROC`` (or ``NPROC``) when
  set before JAX made its CPU client, else one per core the process may use (XLA's
  rule)."""
  for name in ("PJRT_NPROC", "NPROC"):
    if os.environ.get(name, "").strip().isdigit():
      return int(os.environ[name])
  return len(os.sched_getaffinity(0))


def one_thread_section(cfg: dict) -> dict:
  """The batch section run by a child process whose XLA thread pool has one thread
  (``PJRT_NPROC=1``), on the same cores.

  XLA's CPU runtime runs a compiled loop body's independent ops concurrently on its
  thread pool (one thread per core by default), and by default splits larger fusions
  into one task per thread (the matching insertion programs compile without that split:
  ``api.COMPILER_OPTIONS``). A parallel round has several independent small ops, so on
  two cores a round may hand work to the second thread and back; the sequential step is
  nearly a chain. With one pool thread the same programs run without any hand-off, so
  the two timings separate the algorithm's cost from the runtime's scheduling. The
  pool's size is fixed when JAX creates its CPU client, so it takes a process of its own.
  """
  argv = ["--section", "batch", "--no-batch-one-thread",
          "--batch-repeats", str(cfg["batch_repeats"]), "--batch-seeds", str(cfg["batch_seeds"]),
          "--batch-n", *map(str, cfg["batch_n"]), "--batch-families", *cfg["batch_families"],
          "--batch-sweep" if cfg["batch_sweep"] else "--no-batch-sweep",
          "--batch-widths", *map(str, cfg["batch_widths"]),
          "--batch-relabel", cfg["batch_relabel"]]
  with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.executable, "-m", "experiments.bench_matching", *argv, "--out", out],
                   check=True, env=dict(os.environ, PJRT_NPROC="1"))
    with open(os.path.join(out, "results.json")) as f:
      return json.load(f)["batch"]


def print_batch(section: dict) -> None:
  print(f"batch rounds (insert_batch, chunks of n/{section['chunks']}) vs sequential "
        f"(insert_many, same chunks); median of {section['repeats']} interleaved runs; "
        f"relabel rule {section.get('batch_relabel', 'global')}")
  here = f"{section.get('cores', '?')} cores, {section.get('xla_threads', '?')} XLA threads"
  runs = [(here, section["rows"])]
  if section.get("one_thread_rows"):
    runs.append(("one XLA thread", section["one_thread_rows"]))
  if section.get("sweep"):
    runs.append((f"batch widths, {here}", section["sweep"]))
  if section.get("one_thread_sweep"):
    runs.append(("batch widths, one XLA thread", section["one_thread_sweep"]))
  for cores, rows in runs:
    print(f"{cores}:")
    print(f"{'family':>10s} {'n':>6s} {'seed':>4s} {'width':>5s} {'batch s':>8s} {'seq s':>7s} "
          f"{'b/s':>5s} {'rounds':>8s} {'fallb':>5s} {'restarts':>8s} {'batch/OPT':>9s} "
          f"{'seq/OPT':>7s} {'rows/step':>9s}")
    for r in rows:
      print(f"{r['family']:>10s} {r['n']:6d} {r['seed']:4d} {r['chunk']:5d} {r['batch_s']:8.2f} "
            f"{r['sequential_s']:7.2f} {r['batch_vs_sequential']:5.2f} {r['rounds']:8d} "
            f"{r['fallbacks']:5d} {r['batch_restarts']:4d}/{r['sequential_restarts']:<3d} "
            f"{r['batch_ratio']:9.3f} {r['sequential_ratio']:7.3f} "
            f"{r.get('rows_per_step', float('nan')):9.2f}")


def write_rows_csv(path: str, rows: list[dict]) -> None:
  """One row per instance: every scalar field of the rows."""
  keys = [k for k in rows[0] if not isinstance(rows[0][k], list)]
  with open(path, "w", newline="") as f:
    w = csv.DictWriter(f, keys, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)


def ratios(result: dict) -> list[Ratio]:
  """Time ratios of ``exact`` (all n insertions) to its anchors, per n, same run.

  ``exact`` vs the same step in plain numpy (run for n <= 2,000 only) and vs one
  scipy solve of the final problem; ``push_relabel`` vs ``exact``, with both
  costs / OPT in the note. Where the ``cpp`` section ran: ``push_relabel``
  (``insert_many``, default options and the C++ options) vs the official C++
  code's sequential algorithm, mean over seeds of the per-seed ratios. Where the
  ``batch`` section ran: ``insert_batch`` vs ``insert_many`` per family and n, mean
  over seeds of the per-seed ratios.
  """
  out = []
  for r in result.get("rows", []):
    n = r["n"]
    if r.get("numpy_exact_s"):
      out.append(Ratio(f"exact vs the same step in numpy, n = {n}",
                       r["exact_s"] / r["numpy_exact_s"], "all n insertions; target: <= 1"))
    out.append(Ratio(f"exact (all n insertions) vs one scipy solve, n = {n}",
                     r["exact_s"] / r["scipy_one_solve_s"],
                     "target: < 1 at n = 10,000" if n >= 10000 else ""))
    out.append(Ratio(f"push_relabel vs exact, n = {n}", r["push_relabel_s"] / r["exact_s"],
                     f"cost / OPT {r['push_relabel_ratio']:.3f} vs {r['exact_ratio']:.3f}; "
                     f"greedy {r['greedy_ratio']:.3f}"))
  rows = result.get("cpp", {}).get("rows", [])
  for n in dict.fromkeys(r["n"] for r in rows):
    at = [r for r in rows if r["n"] == n]
    mean = lambda key, at=at: float(np.mean([r[key] for r in at]))
    for name, label in (("default", "push_relabel"), ("cpp_options", "push_relabel, C++ options")):
      per_seed = [r[f"ours_{name}_s"] / r["cpp_official_s"] for r in at]
      out.append(Ratio(
          f"{label} (insert_many) vs the official C++ push-relabel, n = {n}",
          float(np.mean(per_seed)),
          f"{len(at)} seeds, {min(per_seed):.2f}-{max(per_seed):.2f}; cost / OPT "
          f"{mean(f'ours_{name}_ratio'):.3f} vs {mean('cpp_ratio'):.3f}; target: <= 1"))
  rows = result.get("batch", {}).get("rows", [])
  for family, n in dict.fromkeys((r["family"], r["n"]) for r in rows):
    at = [r for r in rows if (r["family"], r["n"]) == (family, n)]
    per_seed = [r["batch_vs_sequential"] for r in at]
    mean = lambda key, at=at: float(np.mean([r[key] for r in at]))
    out.append(Ratio(
        f"push_relabel batch rounds (insert_batch) vs sequential (insert_many), {family} "
        f"n = {n}", float(np.mean(per_seed)),
        f"{len(at)} seeds, {min(per_seed):.2f}-{max(per_seed):.2f}; {mean('rounds'):.0f} rounds, "
        f"{mean('fallbacks'):.0f} fallbacks; rows read per sequential step "
        f"{mean('rows_per_step'):.2f}; cost / OPT {mean('batch_ratio'):.3f} vs "
        f"{mean('sequential_ratio'):.3f}; target: <= 2"))
  return out


CONFIGS = {
    "full": dict(n=[1000, 2000, 10000], cpp_n=[2000], cpp_seeds=3, cpp_repeats=3,
                 cpp_probe_n=[32, 256], cpp_opt="-O2", trace_steps=2000,
                 batch_n=[1000, 2000], batch_seeds=2, batch_repeats=3,
                 batch_families=["uniform", "clustered"], batch_one_thread=True,
                 batch_sweep=True, batch_widths=[10, 25, 50, 100, 200],
                 batch_relabel="global"),
    "quick": dict(n=[1000], cpp_n=[500], cpp_seeds=2, cpp_repeats=3, cpp_probe_n=[32, 128],
                  cpp_opt="-O2", trace_steps=2000, batch_n=[500], batch_seeds=1, batch_repeats=3,
                  batch_families=["uniform", "clustered"], batch_one_thread=False,
                  batch_sweep=False, batch_widths=[10, 25, 50, 100, 250],
                  batch_relabel="global"),
}
SECTIONS = ("anchors", "cpp", "batch", "all")


def cli() -> ExperimentCLI:
  """The command line: every field of ``CONFIGS``, and ``--section``."""
  c = ExperimentCLI(__doc__, CONFIGS, out="results/bench_matching", helps={
      "n": "instance sizes (section anchors)",
      "cpp_n": "instance sizes of the C++ comparison (section cpp)",
      "cpp_seeds": "uniform instances (seeds 0..) per size",
      "cpp_repeats": "timed runs per implementation and instance (the median counts)",
      "cpp_probe_n": "extra sizes (seed 0) for the per-step model a + b n",
      "cpp_opt": "the C++ program's optimization flags (pass as --cpp-opt=-O0)",
      "trace_steps": "steps of late arrivals traced op by op (0: no trace)",
      "batch_n": "instance sizes of the batch vs sequential comparison (section batch)",
      "batch_seeds": "instances (seeds 0..) per family and size (section batch)",
      "batch_repeats": "timed runs of each mode per instance (the median counts)",
      "batch_families": "instance families (jaxlab.data.matching_instances)",
      "batch_one_thread": "also time the batch section in a child process with one XLA thread "
                          "(PJRT_NPROC=1)",
      "batch_sweep": "also compare at each of batch_widths (first family and size, seed 0)",
      "batch_widths": "batch widths of the sweep (each must divide the first batch_n)",
      "batch_relabel": "the rounds' relabel rule: global (the paper's) or own (each request "
                       "by its own minimum slack; not the paper's)"},
      choices={"batch_families": FAMILIES, "batch_relabel": ("global", "own")})
  c.parser.add_argument("--section", choices=SECTIONS, default="anchors",
                        help="anchors (exact vs numpy and scipy; the default), cpp "
                             "(push-relabel vs the official C++), batch (push-relabel's "
                             "parallel rounds vs its sequential algorithm) or all")
  return c


def main(argv=None) -> dict:
  args, _, cfg = cli().parse(argv)
  print(f"backend={jax.default_backend()}")
  result = {"backend": jax.default_backend(), "jax": jax.__version__}
  if args.section in ("anchors", "all"):
    result["rows"] = anchors(cfg["n"])
  if args.section in ("cpp", "all"):
    result["cpp"] = run_cpp_section(cfg)
    result["cpp"]["config"] = {k: v for k, v in cfg.items()
                               if k != "n" and not k.startswith("batch_")}
    print_cpp(result["cpp"])
  if args.section in ("batch", "all"):
    result["batch"] = run_batch_section(cfg)
    result["batch"]["config"] = {k: v for k, v in cfg.items() if k.startswith("batch_")}
    print_batch(result["batch"])
  os.makedirs(args.out, exist_ok=True)
  if result.get("cpp", {}).get("rows"):
    write_cpp_csv(os.path.join(args.out, "cpp.csv"), result["cpp"])
  if result.get("batch", {}).get("rows"):
    write_rows_csv(os.path.join(args.out, "batch.csv"), result["batch"]["rows"])
  result = save_json(os.path.join(args.out, "results.json"), result, "bench_matching", argv,
                     default=lambda x: None if np.isnan(x) else x)
  return result


def anchors(sizes: list[int]) -> list[dict]:
  """Section anchors: one row per size (seed 0), printed."""
  rows = [bench(n, 0, numpy_anchor=n <= 2000) for n in sizes]
  print(f"{'n':>6s} {'exact s':>8s} {'numpy s':>8s} {'np/ours':>8s} {'scipy 1x':>9s} "
        f"{'ours/scipy':>10s} {'PR s':>7s} {'PR/OPT':>7s} {'greedy/OPT':>10s}")
  for r in rows:
    np_s = r.get("numpy_exact_s", float("nan"))
    print(f"{r['n']:6d} {r['exact_s']:8.2f} {np_s:8.2f} {np_s / r['exact_s']:8.2f} "
          f"{r['scipy_one_solve_s']:9.2f} {r['exact_s'] / r['scipy_one_solve_s']:10.2f} "
          f"{r['push_relabel_s']:7.2f} {r['push_relabel_ratio']:7.3f} {r['greedy_ratio']:10.3f}")
  return rows


if __name__ == "__main__":
  main()
