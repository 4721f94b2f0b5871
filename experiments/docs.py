"""Every measured number in the README and ``docs/methods/`` comes from a results file.

    python -m experiments.docs            # rewrite the generated regions in place
    python -m experiments.docs --check    # exit 1 listing regions that differ

A generated region is ``<!-- gen:KEY -->...<!-- /gen -->`` in ``README.md`` or
``docs/methods/*.md``: a whole table (the region spans lines) or one number in
prose (inline). ``KEY`` is ``<method>.<name>``; :data:`SOURCES` maps each method
to a function that reads the committed record (``docs/results/<method>/<scale>/
results.json``, the run_all report, the benchmarks) and returns ``{name: text}``.
So a new run, committed under ``docs/results/``, changes the docs by running this
module, and ``tests/experiments/test_docs.py`` fails while they disagree.

Spread over seeds follows the README's convention: ``a ± b`` is the mean and the
sample standard deviation (``ddof=1``), ``lo-hi`` the min-max over seeds.
"""

from __future__ import annotations

import functools
import glob
import importlib
import os
import re
import sys
from collections.abc import Callable

import numpy as np

from experiments import methods, protocol
from experiments.cli import ExperimentCLI
from experiments.pages import (  # noqa: F401 (moving to the experiments' page())
    RESULTS,
    ROOT,
    claims_table,
    f,
    g,
    load,
    minmax,
    not_recorded,
    pct,
    pm,
    quick_and_full,
    recorded,
    seconds,
    signed,
    span,
    thousands,
)
from experiments.reporting import check_claims
from experiments.reporting import markdown_table as table
from experiments.reporting import sample_std as std  # the house spread (jaxlab.core.stats)

GEN = re.compile(r"<!-- gen:(?P<key>[\w./-]+) -->(?P<body>.*?)<!-- /gen -->", re.S)


def doc_files() -> list[str]:
  """The files whose generated regions this module owns."""
  return [os.path.join(ROOT, "README.md"),
          *sorted(glob.glob(os.path.join(ROOT, "docs", "methods", "*.md")))]


# ---------------------------------------------------------------------------
# The README's own numbers: the run_all report.


def _status(method) -> str:
  return ("ported to the protocol" if method.ported
          else f"test bed under repair (issue {method.repair_issue})")


def methods_table() -> str:
  """The README's methods table, from the registry (:mod:`experiments.methods`)."""
  def row(title, page, summary, library, status, citation):
    link = f"[{title}]({page})" + (f" {summary}" if summary.startswith("(") else
                                   f": {summary}" if summary else "")
    return [link, ", ".join(f"`{m}`" for m in library), status, citation]

  rows = [row(m.title or m.name, m.page, m.summary, m.library, _status(m), m.citation)
          for m in methods.METHODS]
  rows += [row(c.name, c.page, c.summary, c.library, "shared component", "-")
           for c in methods.COMPONENTS]
  return table(["method", "module", "evidence", "paper"], rows)


def readme() -> dict[str, str]:
  """The README's tables: the methods (registry) and the verdicts of every method's primary
  claim under the protocol, on its committed full record (quick run times from run_all)."""
  report = load("run_all", "quick", "report.json")
  quick = {e["experiment"]["module"]: e for e in report["entries"]}
  rows, primaries = [], []
  for m in methods.METHODS:
    e = quick[m.module]
    wall = e["experiment"]["wall_time_s"] + e.get("bench", {}).get("wall_time_s", 0.0)
    ratios = len(e.get("ratios") or []) if "bench" in e else None
    record = recorded(m.module, "full")
    if record is None:
      primary, tally = "cannot tell (no full run recorded)", "-"
      primaries.append("cannot tell")
    else:
      decisions = protocol.method_decisions(m, record)
      primary = decisions[0].verdict + (" (under repair)" if not m.ported else "")
      primaries.append(decisions[0].verdict)
      tally = " / ".join(str(n) for n in protocol.counts(decisions).values())
    rows.append([m.name, seconds(wall), primary, tally, "-" if ratios is None else str(ratios)])
  headline = protocol.counts([protocol.Decision("", "", v, "") for v in primaries])
  return {
      "run_all_minutes": f"{report['wall_time_s'] / 60:.1f}",
      "run_all_seconds": seconds(report["wall_time_s"]),
      "methods_table": methods_table(),
      "primary_counts": ", ".join(f"{n} {v}" for v, n in headline.items()),
      "ported": f"{sum(m.ported for m in methods.METHODS)} of {len(methods.METHODS)}",
      "run_all_table": table(["method", "quick: wall time (with benchmark)",
                              "primary claim (full run)",
                              "full run: held / refuted / inconclusive / cannot tell",
                              "quick: benchmark ratios"], rows),
  }


SOURCES: dict[str, Callable[[], dict[str, str]]] = {"readme": readme}


def register(name: str):
  """Adds a method's value function to :data:`SOURCES`."""
  def wrap(fn):
    SOURCES[name] = fn
    return fn
  return wrap


@functools.cache
def values(source: str) -> dict[str, str]:
  if source not in SOURCES:
    raise KeyError(f"no source {source!r} for generated docs (known: {sorted(SOURCES)})")
  return SOURCES[source]()


def value(key: str) -> str:
  """The text of generated region ``KEY`` (``<source>.<name>``)."""
  source, _, name = key.partition(".")
  vals = values(source)
  if name not in vals:
    raise KeyError(f"generated docs: {source!r} has no value {name!r}")
  return vals[name]


def render(text: str) -> tuple[str, list[tuple[str, str, str]]]:
  """``text`` with every generated region refreshed, and the regions that changed."""
  changed = []

  def fill(m: re.Match) -> str:
    new = value(m.group("key"))
    body = f"\n{new}\n" if "\n" in new or m.group("body").startswith("\n") else new
    if body != m.group("body"):
      changed.append((m.group("key"), m.group("body").strip(), new))
    return f"<!-- gen:{m.group('key')} -->{body}<!-- /gen -->"

  return GEN.sub(fill, text), changed


def stale() -> dict[str, list[tuple[str, str, str]]]:
  """``{file: [(key, committed, generated), ...]}`` for regions that are out of date."""
  out = {}
  for path in doc_files():
    with open(path) as fh:
      _, changed = render(fh.read())
    if changed:
      out[os.path.relpath(path, ROOT)] = changed
  return out


# ---------------------------------------------------------------------------
# Quantized Adam and Muon (docs/methods/quant_optim.md)


def _median_seeds(x) -> np.ndarray:
  return np.median(np.asarray(x, np.float64), axis=-1)


# issue 16's targets for the whole training step, as ratios to optax.adam (medians)
BENCH_TARGETS = (("quantized_adam (none)", "no quantization", 1.05),
                 ("G+M+V+W nearest", "G+M+V+W nearest", 1.5),
                 ("G+M+V+W stochastic", "G+M+V+W stochastic", 1.7),
                 ("storage int8", "int8 storage", 1.3),
                 ("storage float8_e4m3fn", "float8 storage", 1.5))


@register("quant_optim")
def quant_optim() -> dict[str, str]:
  r = load("quant_optim", "full")
  runs = [load("quant_optim", "bench")]
  ms = r["mantissa_sweep"]
  mant = ms["mantissas"]
  at = {m: mant.index(m) for m in (1, 3, 7)}
  loss = {k: _median_seeds(v) for k, v in ms["final_loss"].items()}
  summ = r["summary"]
  mstar = {k.split("/", 1)[1]: v for k, v in summ.items() if k.startswith("rosenbrock_mstar/")}
  mlp = r["mlp"]
  acc = {k: np.asarray(v, np.float64)[..., 1].mean(-1) for k, v in mlp["loss_acc"].items()}
  macc = {m: i for i, m in enumerate(mlp["mantissas"])}
  ab = r["ablation"]
  ratios = {}
  for name in ("adam", "muon"):
    fp32 = float(np.median(ab["final_loss"][f"{name}/fp32"]))
    ratios[name] = _median_seeds(ab["final_loss"][f"{name}/nearest"]) / fp32  # (M, GWMV)
    ratios[name + "/stochastic"] = _median_seeds(ab["final_loss"][f"{name}/stochastic"]) / fp32
  b2 = r["beta2"]
  near = _median_seeds(b2["final_loss"]["nearest"])
  i7 = b2["mantissas"].index(7)
  hz = r["horizon"]
  stars = {k: [row["m_star"] for row in v["rows"]] for k, v in hz.items()}
  ts = [row["T"] for row in hz["adam"]["rows"]]
  sat = next(i for i in range(len(ts)) if all(m >= 20 for m in stars["muon"][i:]))
  muon_fp32 = min(row["loss"][-1] for row in hz["muon"]["rows"][sat:])
  bench = runs[0]["rows"]
  storage = {k.split("/", 1)[1]: v for k, v in summ.items() if k.startswith("storage_loss_ratio/")}
  accs = {k: float(np.asarray(v)[:, 1].mean()) for k, v in mlp["storage_adam"].items()}
  acc_text = (f"test accuracy {f(accs['None'], 3)} for all"
              if len({f(a, 3) for a in accs.values()}) == 1 else
              "test accuracy " + ", ".join(f"{'fp32' if k == 'None' else k} {f(a, 3)}"
                                           for k, a in accs.items()))
  eight = ("bfloat16", "float8_e4m3fn", "int8")
  bytes_ = {st: bench[f"storage {st}"]["state_bytes_ratio"] for st in eight}
  storage_ok = (all(abs(storage[st] - 1) <= 0.05 for st in eight)
                and bytes_["int8"] <= 0.3 and bytes_["float8_e4m3fn"] <= 0.3)
  claims = [
      ["Adam on Rosenbrock: diverges at M = 1, slow at M = 3, near fp32 at M = 7-10",
       f"all of G, W, M, V quantized, nearest: loss {g(loss['adam/nearest'][at[1]])} (M = 1, "
       f"no progress), {g(loss['adam/nearest'][at[3]])} (M = 3), "
       f"{g(loss['adam/nearest'][at[7]])} (M = 7) vs {g(loss['adam/nearest'][-1])} fp32; "
       f"M* = {mstar['adam/nearest']}. Stochastic rounding: "
       + " / ".join(g(loss["adam/stochastic"][at[m]]) for m in (1, 3, 7))
       + f", M* = {mstar['adam/stochastic']}",
       f"partly: the ordering holds, but nearest needs M = {mstar['adam/nearest']}, not 7-10"],
      ["Muon tolerates coarser quantization than Adam",
       f"at equal update RMS, Muon's loss at M = 7 is {g(loss['muon/nearest'][at[7]], 2)} vs "
       f"Adam's {g(loss['adam/nearest'][at[7]])} on the same Rosenbrock; digits MLP test "
       f"accuracy with nearest rounding: Muon {f(acc['muon/nearest'][macc[3]], 3)} at M = 3 "
       f"(fp32 {f(acc['muon/nearest'][-1], 3)}), Adam {f(acc['adam/nearest'][macc[3]], 3)} "
       f"at M = 3 and {f(acc['adam/nearest'][macc[4]], 3)} at M = 4 "
       f"(fp32 {f(acc['adam/nearest'][-1], 3)})",
       f"yes in absolute terms and in accuracy; relative to its own fp32 loss Muon's M* is "
       f"{mstar['muon/nearest']} (nearest) and {mstar['muon/stochastic']} (stochastic), "
       f"against Adam's {mstar['adam/nearest']} (its fp32 loss is far lower: "
       f"{g(loss['muon/nearest'][-1], 2)} on Rosenbrock)"],
      ["sensitivity V > W > M > G",
       "one component at a time, noisy least squares, nearest: W "
       + " / ".join((f"{x:.0f}" if x >= 10 else g(x)) + "x" for x in ratios["adam"][:, 1])
       + " fp32 loss at M = " + " / ".join(str(m) for m in ab["mantissas"])
       + "; G, M, V " + span(ratios["adam"][:, [0, 2, 3]].ravel())
       + "x at every M (Adam), G, M " + span(ratios["muon"][:, [0, 2]].ravel())
       + "x (Muon; its V is not measured here: every parameter of these problems is a "
       "matrix, and only Muon's Adam part for non-matrix parameters has a V)"
       + "; stochastic rounding cuts W at M = "
       f"{ab['mantissas'][0]} to {g(ratios['adam/stochastic'][0, 1], 2)}x",
       "W most sensitive: yes; V second: not reproduced"],
      ["beta2 -> 1 makes V quantization hurt",
       "only V quantized, noiseless least squares, final loss at M = 7 nearest vs fp32: "
       + ", ".join(f"{g(near[j, i7], 2)} vs {g(near[j, -1], 2)} "
                   + (f"(beta2 {b:g})" if j == 0 else f"({b:g})")
                   for j, b in enumerate(b2["beta2"]) if b != 0.99),
       "no: quantized V ended lower than fp32 here (a stalled, too-large v shrinks Adam's "
       "steps near the optimum)"],
      ["M need only grow like log T",
       f"Adam, Rosenbrock, cosine schedule, T = {ts[0]} ... {ts[-1] // 1000}k: M* = "
       + ", ".join(str(m) for m in stars["adam"])
       + f"; fit {g(hz['adam']['slope_per_doubling'], 2)} bits per doubling of T "
       f"(R^2 {f(hz['adam']['r2'])}). Muon: M* saturates at "
       f"{span(stars['muon'][sat:], lambda x: str(int(x)))} from T = {ts[sat]} (its fp32 "
       f"loss reaches "
       f"{g(muon_fp32, 1)})",
       "Adam: growth with log T, yes (noisy); Muon: not measurable with this criterion"],
      ["(ours) 8-bit moment storage matches fp32",
       f"digits MLP, Adam, {mlp['steps']} steps, final training loss vs fp32: "
       + ", ".join(f"{st} {f(storage[st], 3)}x" for st in eight)
       + f"; {acc_text}; state bytes "
       + " / ".join(g(bytes_[st]) + "x" for st in eight) + " of `optax.adam`",
       ("yes" if storage_ok else "no") + " (target: within 5%, at most 0.3x memory)"],
  ]
  names = [("quantized_adam (none)", "`quantized_adam`, no quantization"),
           ("G+M+V+W nearest", "G+M+V+W simulated, nearest"),
           ("G+M+V+W stochastic", "G+M+V+W simulated, stochastic"),
           ("storage bfloat16", '`moment_storage="bfloat16"`'),
           ("storage float8_e4m3fn", '`moment_storage="float8_e4m3fn"`'),
           ("storage int8", '`moment_storage="int8"`')]

  def rng(key, col):
    """The recorded run's median ratio over interleaved rounds and the rounds' min-max."""
    row = runs[0]["rows"][key]
    if col == "state_bytes_ratio":
      return g(row[col]) + "x"
    lo, hi = row[f"{col}_range"]
    return f"{f(row[col])}x ({f(lo)}-{f(hi)})"

  bench_rows = [[label, rng(k, "opt_step_ratio"), rng(k, "train_step_ratio"),
                 rng(k, "state_bytes_ratio")] for k, label in names]
  return {
      "seeds": str(r["config"]["seeds"]),
      "wall": seconds(r["wall_time_s"]),
      "claims": table(["paper's claim", "our measurement", "held?"], claims),
      "bench_params": f"{g(runs[0]['num_params'] / 1e6)}M",
      "bench_rounds": str(len(runs[0]["rows"]["optax.adam"]["opt_step_s_rounds"])),
      "bench": table(["configuration", "optimizer step", "whole training step", "state bytes"],
                     bench_rows),
      "bench_step_ms": g(bench["optax.adam"]["opt_step_s"] * 1e3, 2),
      "bench_targets": "; ".join(
          f"{label} {f(bench[k]['train_step_ratio'])}x against {t:g}x: "
          + ("met" if bench[k]["train_step_ratio"] <= t else "missed")
          for k, label, t in BENCH_TARGETS),
  }


# ---------------------------------------------------------------------------
# Incremental metric bipartite matching (docs/methods/matching_incremental.md)


def secs(x: float) -> str:
  """A duration as the docs print it: ``2,349 s``, ``16.8 s``, ``0.12 s``."""
  return (f"{thousands(x)} s" if x >= 100 else f"{x:.1f} s" if x >= 1 else f"{g(x, 2)} s")


FAMILY = {"uniform": "uniform 2-D", "clustered": "clustered 2-D", "digits_l1": "digits 64-D L1",
          "road_graph": "road graph"}


def _instances(result: dict) -> list[tuple[str, int, list[dict]]]:
  """``(family, n, runs over seeds)`` in the config's order."""
  return [(fam, n, [r for r in result["runs"] if r["family"] == fam and r["n"] == n])
          for fam, n in result["config"]["instances"]]


def _final(runs, alg, at=-1):
  return np.array([r["algorithms"][alg]["ratio"][at] for r in runs])


def _time(runs, alg):
  return float(np.mean([r["algorithms"][alg]["time_s"] for r in runs]))


def _batch_cell(runs) -> str:
  """The batch column: final cost / OPT, time and rounds, means over the seeds."""
  b = [r["algorithms"]["push_relabel/batch"] for r in runs]
  return (f"{f(float(np.mean([x['ratio'][-1] for x in b])), 3)}, "
          f"{secs(float(np.mean([x['time_s'] for x in b])))}, "
          f"{thousands(float(np.mean([x['rounds'] for x in b])))} rounds")


def _batch_bench(result: dict, record: str = "bench_batch") -> str:
  """``bench_matching --section batch``: batch rounds vs sequential on the same chunks (and,
  where recorded, the same comparison in a process with one XLA thread); ``record``: the
  folder under ``docs/results/matching_incremental/``."""
  sec = result["batch"]
  one = sec.get("one_thread_rows") or []
  rows = []

  def spread(v: list[float]) -> str:
    return f"{f(float(np.mean(v)))} ({minmax(v)})" if len(v) > 1 else f(v[0])

  counted = all("rows_per_step" in r for r in sec["rows"])  # recorded since the count exists
  for (family, n), at in _by_instance(sec["rows"]).items():
    per = [r["batch_vs_sequential"] for r in at]
    mean = lambda k, at=at: float(np.mean([r[k] for r in at]))  # noqa: E731
    row = [f"{FAMILY[family]}, n = {thousands(n)}", secs(mean("batch_s")),
           secs(mean("sequential_s")), spread(per)]
    if one:
      per1 = [r["batch_vs_sequential"] for r in one if (r["family"], r["n"]) == (family, n)]
      row.append(spread(per1))
    per_step = ([f(mean("rows_per_step"))] if counted else [])
    rows.append(row + [thousands(mean("rounds")), thousands(mean("fallbacks"))] + per_step
                + [f"{f(mean('batch_ratio'), 3)} / {f(mean('sequential_ratio'), 3)}"])
  seeds = len({r["seed"] for r in sec["rows"]})
  head = ["instance", "batch rounds", "sequential", "batch / sequential"]
  if one:
    head.append("batch / sequential, one XLA thread")
  cores = _pool_text(sec)
  note = (f" Times and the first ratio: {cores}; the one-thread ratio: the same comparison in a "
          "process on the same cores whose XLA thread pool has one thread (`PJRT_NPROC=1`). "
          f"Runs with batch within 2x of sequential: {_within(sec['rows'])} with the default "
          f"pool, {_within(one)} with one thread." if one else f" Times on {cores}.")
  if sec.get("batch_relabel", "global") == "own":
    note += (" Relabel rule: each free request of the level rises by its own minimum slack + 1 "
             "(`batch_relabel=\"own\"`, not the paper's rule).")
  runs = (f"Median of {sec['repeats']} interleaved runs per mode" if sec["repeats"] > 1
          else "One run per mode")
  over = f", mean (min-max) over {seeds} seeds" if seeds > 1 else f", seed {sec['rows'][0]['seed']}"
  per_step = (["requests read per sequential step"] if counted else [])
  note += (" Requests read per sequential step: the requests the batch rounds gathered, each "
           "with its slacks to all n servers (`extra.rows_read`), over the sequential "
           "algorithm's steps, each of which computes that for one request: about the time ratio "
           "the batch would reach if its rounds computed each request's slacks as fast as a "
           "step does." if counted else "")
  return ("\n" + table(head + ["rounds", "fallbacks"] + per_step
                       + ["cost / OPT (batch / sequential)"], rows)
          + f"\n\n{runs}{over}; arrivals in chunks of n/{sec['chunks']}, the same for both "
            f"modes.{note} Record: `docs/results/matching_incremental/{record}/`.\n"
          + _batch_sweep(sec, cores))


def _pool_text(sec: dict) -> str:
  """The cores and XLA thread pool a ``bench_matching --section batch`` result ran on."""
  threads = sec.get("xla_threads", sec.get("cores"))
  return (f"{sec['cores']} cores" if "cores" in sec else "all cores") + (
      f", XLA's thread pool of {thousands(threads)} thread{'s' * (threads != 1)}"
      if threads is not None else "")


def _run_key(r: dict) -> tuple:
  """A batch-section row's run: ``(family, n, seed, chunk)``."""
  return r["family"], r["n"], r["seed"], r["chunk"]


def _within(rows: list[dict]) -> str:
  """How many of the batch section's ``rows`` have batch within 2x of sequential."""
  return f"{sum(r['batch_vs_sequential'] <= 2 for r in rows)} of {len(rows)}"


def _compare_batch(pairs: list[tuple[str, dict, dict]], key: str, names: tuple[str, str],
                   phrases: tuple[str, str], sources: tuple[str, str]) -> dict[str, str]:
  """Two ``bench_matching --section batch`` results of the same runs, before and after a
  change: ``(record, before, after)`` with the same instances, widths and settings
  (checked). ``names``: the two columns' labels; ``phrases``: how the within-2x counts
  name them; ``sources``: the sentences that say which records hold each. Returns
  ``key``: a table, one row per record, instance and width (mean over seeds), with both
  times, their ratio (after / before), both batch / sequential ratios and both round
  counts (a row notes a record's pool when it has one thread);
  ``key_small`` / ``key_10k``: the range of the time ratio at n < 10,000 / n >= 10,000;
  ``key_within``: runs at n < 10,000 with batch within 2x of sequential, per relabel
  rule, before and after."""
  rows, ratios, within = [], {"small": [], "10k": []}, {}
  same = ("batch_relabel", "chunks", "repeats", "cores", "xla_threads")
  before_name, after_name = names
  for record, before, after in pairs:
    old_sec, new_sec = before["batch"], after["batch"]
    if any(old_sec.get(k) != new_sec.get(k) for k in same):
      raise ValueError(f"the records paired with {record} differ in their settings ({same})")
    rule = "own" if new_sec.get("batch_relabel") == "own" else "paper's"
    threads = ", one XLA thread" if new_sec.get("xla_threads") == 1 else ""
    for part in ("rows", "sweep"):
      old, new = old_sec.get(part) or [], {_run_key(r): r for r in new_sec.get(part) or []}
      if sorted(map(_run_key, old)) != sorted(new):
        raise ValueError(f"the records paired with {record} hold other {part}")
      for (family, n, chunk), at in _by_instance(old, with_chunk=True).items():
        now = [new[_run_key(r)] for r in at]
        mean = lambda rs, k: float(np.mean([r[k] for r in rs]))  # noqa: E731
        ratios["10k" if n >= 10000 else "small"].append(mean(now, "batch_s")
                                                        / mean(at, "batch_s"))
        rows.append([f"`{record}`", f"{FAMILY[family]}, n = {thousands(n)}, width "
                     f"{thousands(chunk)}" + (f" (seed {at[0]['seed']})" if len(at) == 1 else "")
                     + threads, rule,
                     secs(mean(at, "batch_s")), secs(mean(now, "batch_s")),
                     f(mean(now, "batch_s") / mean(at, "batch_s")),
                     f"{f(mean(at, 'batch_vs_sequential'))} / "
                     f"{f(mean(now, 'batch_vs_sequential'))}",
                     f"{thousands(mean(at, 'rounds'))} / {thousands(mean(now, 'rounds'))}"])
    small = [r for r in old_sec["rows"] if r["n"] < 10000]
    if small:
      now = [r for r in new_sec["rows"] if r["n"] < 10000]
      within.setdefault(rule, f"{_within(small)} {phrases[0]}, {_within(now)} {phrases[1]}")
  cores = {p[2]["batch"].get("cores") for p in pairs}
  if len(cores) != 1 or None in cores:
    raise ValueError(f"the records paired with {key} ran on different or unrecorded cores")
  pools = sorted({_pool_text(p[2]["batch"]) for p in pairs})
  text = ("\n" + table(["record", "instance", "relabel rule", f"batch rounds, {before_name}",
                        after_name,
                        f"{after_name} / {before_name}",
                        f"batch / sequential ({before_name} / {after_name})",
                        f"rounds ({before_name} / {after_name})"], rows)
          + f"\n\n{sources[0]}; {sources[1]} Times as in those records (a median of several "
            f"runs, or one run); mean over seeds; separate processes on {' or '.join(pools)}.\n")
  return {key: text, f"{key}_small": span(ratios["small"]), f"{key}_10k": span(ratios["10k"]),
          f"{key}_within": "; ".join(f"{rule}: {w}" for rule, w in within.items())}


def _batch_pairs(before: str, after: str, records: tuple[str, ...]) -> list[tuple[str, dict, dict]]:
  """``(record, record + before, record + after)`` results of the matching batch records."""
  return [(r, load("matching_incremental", r + before), load("matching_incremental", r + after))
          for r in records]


def _commits(pairs: list[tuple[str, dict, dict]], which: int) -> str:
  """The git commits (short) the ``which``-th results of ``pairs`` were made at."""
  return ", ".join(sorted({p[which]["provenance"]["git_commit"][:7] for p in pairs}))


def _pool_gap(pairs: list[tuple[list[dict], list[dict]]]) -> str:
  """The range of the batch / sequential ratio with one XLA thread over the ratio with the
  default pool, per run: ``(default rows, one-thread rows)`` pairs of the batch section."""
  out = []
  for default, one in pairs:
    by = {_run_key(r): r for r in default}
    out += [r["batch_vs_sequential"] / by[_run_key(r)]["batch_vs_sequential"] for r in one]
  return span(out)


def _by_instance(rows: list[dict], with_chunk: bool = False) -> dict[tuple, list[dict]]:
  """The batch section's rows by ``(family, n)`` (or ``(family, n, chunk)``), in order."""
  out: dict[tuple, list[dict]] = {}
  for r in rows:
    k = (r["family"], r["n"]) + ((r["chunk"],) if with_chunk else ())
    out.setdefault(k, []).append(r)
  return out


def _batch_sweep(sec: dict, cores: str) -> str:
  """The batch section's sweep over batch widths (one instance), where recorded."""
  sweep = sec.get("sweep")
  if not sweep:
    return ""
  one = {r["chunk"]: r for r in sec.get("one_thread_sweep") or []}
  r0 = sweep[0]
  head = ["batch width", "batch rounds", "sequential", "batch / sequential"]
  if one:
    head.append("batch / sequential, one XLA thread")
  rows = []
  for r in sweep:
    row = [thousands(r["chunk"]), secs(r["batch_s"]), secs(r["sequential_s"]),
           f(r["batch_vs_sequential"])]
    if one:
      row.append(f(one[r["chunk"]]["batch_vs_sequential"]))
    counted = ["rows_per_step" in r for r in sweep]
    rows.append(row + [thousands(r["rounds"])]
                + ([f(r["rows_per_step"])] if all(counted) else []) + [f(r["batch_ratio"], 3)])
  within = [r["chunk"] for r in sweep if r["batch_vs_sequential"] <= 2]
  runs = (f"median of {sec['repeats']} interleaved runs per mode" if sec["repeats"] > 1
          else "one run per mode")
  return ("\nThe same comparison at other batch widths, "
          f"{FAMILY[r0['family']]}, n = {thousands(r0['n'])}, seed {r0['seed']} (arrivals in "
          f"chunks of the width; {runs}; {cores}). Batch within 2x of "
          f"sequential with that pool at widths: "
          f"{', '.join(thousands(w) for w in within) or 'none'}.\n\n"
          + table(head + ["rounds"] + (["requests read per sequential step"] if all(counted)
                                       else []) + ["batch cost / OPT"], rows) + "\n")


def _cpp_values(section: dict) -> dict[str, str]:
  """The comparison with the official C++ push-relabel (``bench_matching --section cpp``)."""
  rows = section["rows"]
  cfg = section["config"]
  trows = [[thousands(r["n"]), str(r["seed"]), secs(r["cpp_official_s"]), secs(r["cpp_flat_s"]),
            f"{secs(r['ours_default_s'])} ({f(r['ours_default_ratio'], 3)})",
            f(r["ours_default_s"] / r["cpp_official_s"]),
            f"{secs(r['ours_cpp_options_s'])} ({f(r['ours_cpp_options_ratio'], 3)})",
            f(r["ours_cpp_options_s"] / r["cpp_official_s"]),
            "yes" if r["cpp_options_same_matching"] else "no"] for r in rows]
  main = max((r for r in rows if r["seed"] == 0), key=lambda r: r["n"])
  c = {k: main[f"cpp_{k}"] for k in ("placements", "pushes_free", "pushes_matched", "relabels",
                                     "moves_up", "scans", "servers_scanned")}
  model = section["step_model"]
  steps_at = lambda k: ", ".join(g(1e6 * t, 2) for t in model[k]["s_per_step"])
  trace = section.get("trace", {}).get("default", {})
  copies = trace.get("categories", {}).get("copies")
  return {
      "cpp_setup": (f"n = {span(cfg['cpp_n'], thousands, ', ')}, {cfg['cpp_seeds']} seeds, "
                    f"median of {cfg['cpp_repeats']} runs, {section['compiler'].split(')')[0]}) "
                    f"{section['flags']}"),
      "cpp_table": table(["n", "seed", "official C++", "C++, flat arrays",
                          "ours (cost / OPT)", "ours / C++", "ours, C++ options (cost / OPT)",
                          "ours, C++ options / C++", "same matching as the C++"], trows),
      "cpp_ratio": span([r["ours_default_s"] / r["cpp_official_s"] for r in rows], f),
      "cpp_cost": (f"{span([r['ours_default_ratio'] for r in rows], lambda x: f(x, 3))} vs "
                   f"{span([r['cpp_ratio'] for r in rows], lambda x: f(x, 3))}"),
      "cpp_counts": (f"{thousands(c['placements'])} placements for {thousands(main['n'])} "
                     f"arrivals ({main['cpp_restarts']} omega doublings), "
                     f"{thousands(c['pushes_matched'])} evictions, "
                     f"{thousands(c['relabels'])} relabels, {thousands(c['pushes_free'])} "
                     f"pushes to a free server and {thousands(c['moves_up'])} level moves"),
      "cpp_scanned": f"{100 * c['servers_scanned'] / c['scans'] / main['n']:.0f}%",
      "cpp_last10": f"{100 * main['cpp_last_10pct_share']:.0f}%",
      "cpp_per_step": (f"n = {', '.join(thousands(m) for m in model['ours_default']['n'])}: "
                       f"ours {steps_at('ours_default')}; ours with the C++ options "
                       f"{steps_at('ours_cpp_options')}; the official C++ "
                       f"{steps_at('cpp_official')}; the C++ on flat arrays "
                       f"{steps_at('cpp_flat')}"),
      "cpp_host": f"{100 * main['ours_default_host_s'] / main['ours_default_s']:.1f}%",
      "cpp_ops": (f"{f(trace['ops_per_step'], 0)} compiled ops per step, "
                  f"{f(copies['per_step'], 0)} of them copies writing "
                  f"{g(copies['bytes_per_step'] / main['n'], 3)} bytes per server"
                  if copies else "no trace recorded"),
      "cpp_tables": (", ".join(f"{k:.1f} of {shape}" for shape, k in
                               trace["copies_per_step_by_shape"].items()
                               if "x" in shape and k >= 0.5) or "none") if copies else "n/a",
  }


@register("matching_incremental")
def matching_incremental() -> dict[str, str]:
  push_relabel = importlib.import_module("jaxlab.matching.push_relabel")  # its constants
  quick, full = load("matching_incremental", "quick"), load("matching_incremental", "full")
  bench = load("matching_incremental", "bench")["rows"]
  i90 = round(0.9 * len(quick["runs"][0]["algorithms"]["exact"]["ratio"])) - 1
  i95 = round(0.95 * len(quick["runs"][0]["algorithms"]["exact"]["ratio"])) - 1
  rows = []
  for fam, n, runs in _instances(quick):
    rows.append([f"{FAMILY[fam]}, n = {n}",
                 f"{f(_final(runs, 'push_relabel').mean(), 3)} "
                 + ("(0.9n: " if not rows else "(")
                 + f"{f(_final(runs, 'push_relabel', i90).mean(), 3)}), "
                 f"{secs(_time(runs, 'push_relabel'))}",
                 *[f"{f(_final(runs, a).mean(), 3)}, {secs(_time(runs, a))}"
                   for a in ("push_relabel+tail", "push_relabel/batch", "exact", "greedy")]])
  # scipy's re-solving and one final solve, from the full run (its instances reach n = 10,000)
  resolve = {(fam, n): _time(runs, "scipy/resolve") for fam, n, runs in _instances(full)}
  one = {(fam, n): float(np.mean([r["one_scipy_solve_s"] for r in runs]))
         for fam, n, runs in _instances(full)}
  small = [k for k in resolve if k[1] <= 1000]
  big = [k for k in resolve if k[1] > 1000]
  brows = []
  for b in bench:
    numpy = (f"{secs(b['numpy_exact_s'])} ({g(b['numpy_exact_s'] / b['exact_s'], 2)}x slower)"
             if b.get("numpy_exact_s") else "not run")
    target = "; target 1.05" if b["n"] >= 10000 else ""
    brows.append([thousands(b["n"]), secs(b["exact_s"]), numpy, secs(b["scipy_one_solve_s"]),
                  f(b["exact_s"] / b["scipy_one_solve_s"]),
                  f"{secs(b['push_relabel_s'])} ({f(b['push_relabel_ratio'], 3)}{target})",
                  f(b["greedy_ratio"], 3)])
  b10k = next(b for b in bench if b["n"] == 10000)
  bb_record = load("matching_incremental", "bench_batch")
  bb = bb_record["batch"]
  bb10k = load("matching_incremental", "bench_batch_10k")
  bs = load("matching_incremental", "bench_batch_split")["batch"]
  default_pool = ("bench_batch", "bench_batch_own", "bench_batch_10k", "bench_batch_10k_own",
                  "bench_batch_10k_widths", "bench_batch_10k_widths_clustered")
  split = _batch_pairs("_split", "_nostop", default_pool)
  stop = _batch_pairs("_nostop", "", default_pool + ("bench_batch_10k_one_thread",))
  frows, inst = [], {}
  for fam, n, runs in _instances(full):
    pr = _final(runs, "push_relabel")
    inst[(fam, n)] = runs
    frows.append([f"{FAMILY[fam]}, n = {thousands(n)}",
                  f"{f(pr.mean(), 3)} ({minmax(pr, lambda x: f(x, 3))}), "
                  f"{secs(_time(runs, 'push_relabel'))}",
                  f"{f(_final(runs, 'push_relabel+tail').mean(), 3)}, "
                  f"{secs(_time(runs, 'push_relabel+tail'))}",
                  _batch_cell(runs),
                  f"{f(_final(runs, 'exact').mean(), 3)}, {secs(_time(runs, 'exact'))}",
                  f(_final(runs, "greedy").mean(), 3),
                  secs(float(np.mean([r["one_scipy_solve_s"] for r in runs])))])
  uni, clu, road = inst[("uniform", 10000)], inst[("clustered", 10000)], inst[("road_graph", 5000)]
  speed = {k: _time(runs, "push_relabel") / _time(runs, "exact") for k, runs in inst.items()}
  scipy_vs_exact = [float(np.mean([r["one_scipy_solve_s"] for r in runs])) / _time(runs, "exact")
                    for k, runs in inst.items() if k[1] >= 10000]
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_wall": seconds(quick["wall_time_s"]),
      "quick_table": table(["instance", "push_relabel", "push_relabel + exact tail (50)",
                            "push_relabel, batch rounds (n/20)", "exact", "greedy"], rows),
      "resolve_small": span([resolve[k] for k in small], lambda x: f(x)) + " s",
      "resolve_big": span([resolve[k] for k in big], lambda x: f(x)) + " s",
      "big_n": span([k[1] for k in big], thousands),
      "one_small": span([one[k] for k in small], lambda x: f(x)) + " s",
      "one_big": span([one[k] for k in big], lambda x: f(x)) + " s",
      "bench_table": table(["n", "exact", "same step in numpy", "one scipy solve",
                            "exact / scipy", "push_relabel (cost / OPT)", "greedy / OPT"], brows),
      "bench_10k_speedup": g(b10k["scipy_one_solve_s"] / b10k["exact_s"], 2),
      "bench_10k_exact": secs(b10k["exact_s"]),
      "bench_10k_pr": f(b10k["push_relabel_ratio"], 3),
      "full_seeds": str(full["config"]["seeds"]),
      "full_wall": seconds(full["wall_time_s"]),
      "full_batch_vs_seq": span([_time(runs, "push_relabel/batch") / _time(runs, "push_relabel")
                                 for runs in inst.values()], lambda x: f(x)),
      # every batch entry counts its sequential fallbacks (a record without them raises here)
      "full_fallbacks": thousands(max(r["algorithms"]["push_relabel/batch"]["fallbacks"]
                                      for runs in inst.values() for r in runs)),
      "full_table": table(["instance", "push_relabel", "+ exact tail",
                           "batch rounds (cost, time, rounds)", "exact",
                           "greedy", "one scipy solve"], frows),
      "uniform_10k": f(_final(uni, "push_relabel").mean(), 3),
      "clustered_10k": f(_final(clu, "push_relabel").mean(), 2),
      "clustered_10k_worst": f(_final(clu, "push_relabel").max(), 2),
      "at95": f"{f(_final(uni, 'push_relabel', i95).mean(), 3)} / "
              f"{f(_final(clu, 'push_relabel', i95).mean(), 3)}",
      "exact_vs_scipy": span(scipy_vs_exact, lambda x: g(x, 2)),
      "road_exact": secs(_time(road, "exact")),
      "road_scipy": secs(float(np.mean([r["one_scipy_solve_s"] for r in road]))),
      "pr_range": span([_final(runs, "push_relabel").mean() for runs in inst.values()],
                       lambda x: f(x, 3)),
      "greedy_range": span([_final(runs, "greedy").mean() for runs in inst.values()],
                           lambda x: f(x, 2)),
      "tail_range": span([_final(runs, "push_relabel+tail").mean() for runs in inst.values()],
                         lambda x: f(x, 2)),
      "exact_speedup": span(speed.values(), lambda x: g(x, 2)),
      "exact_speedup_10k": g(speed[("uniform", 10000)], 2),
      **_cpp_values(load("matching_incremental", "bench_cpp")["cpp"]),
      "batch_bench": _batch_bench(bb_record),
      "batch_bench_10k": _batch_bench(bb10k, "bench_batch_10k"),
      "batch_bench_10k_seeds": _batch_bench(load("matching_incremental", "bench_batch_10k_seeds"),
                                            "bench_batch_10k_seeds"),
      "batch_bench_10k_one_thread": _batch_bench(
          load("matching_incremental", "bench_batch_10k_one_thread"),
          "bench_batch_10k_one_thread"),
      "batch_bench_10k_widths": _batch_bench(
          load("matching_incremental", "bench_batch_10k_widths"), "bench_batch_10k_widths"),
      "batch_bench_10k_widths_clustered": _batch_bench(
          load("matching_incremental", "bench_batch_10k_widths_clustered"),
          "bench_batch_10k_widths_clustered"),
      "batch_pool_gap": _pool_gap(
          [(bb["rows"], bb["one_thread_rows"]), (bb["sweep"], bb["one_thread_sweep"]),
           (bb10k["batch"]["rows"],
            load("matching_incremental", "bench_batch_10k_one_thread")["batch"]["rows"])]),
      "batch_pool_gap_split": _pool_gap([(bs["rows"], bs["one_thread_rows"]),
                                         (bs["sweep"], bs["one_thread_sweep"])]),
      **_compare_batch(split, "batch_split", ("split", "unsplit"),
                       ("with the split", "without"),
                       (f"Split: the records made at {_commits(split, 1)}, before the option "
                        f"({', '.join(f'`{r}_split`' for r, _, _ in split)})",
                        f"unsplit: those made at {_commits(split, 2)}, with it and before the "
                        "rounds stopped early (the same names with `_nostop`).")),
      **_compare_batch(stop, "batch_stop", ("to the end", "stopping early"),
                       ("before", "after"),
                       (f"To the end: the records made at {_commits(stop, 1)} "
                        f"({', '.join(f'`{r}_nostop`' for r, _, _ in stop)}), whose rounds "
                        "ran every chunk to its end before the omega check",
                        f"stopping early: those made at {_commits(stop, 2)}, the records of "
                        "the same names without the suffix, above.")),
      # The CPU rounds' blocking constants, from the code (not a measurement).
      "cpu_blocked_from": str(push_relabel._BLOCKED_FROM),
      "cpu_block": str(push_relabel._BLOCK),
      "batch_bench_own": _batch_bench(load("matching_incremental", "bench_batch_own"),
                                      "bench_batch_own"),
      "batch_bench_10k_own": _batch_bench(load("matching_incremental", "bench_batch_10k_own"),
                                          "bench_batch_10k_own"),
  }


def _setting(s) -> str:
  eps, delta, levels = s
  return f"eps {eps:g}, delta {delta:g}, levels {levels}"


def _by_setting(runs: list[dict]) -> dict[tuple, list[dict]]:
  out: dict[tuple, list[dict]] = {}
  for r in runs:
    out.setdefault(tuple(r["setting"]), []).append(r)
  return out


def _fin(runs, key) -> np.ndarray:
  return np.array([r["final"][key] for r in runs], float)


def _cheapest(settings: list[tuple], big: dict, paper: tuple) -> str:
  """The setting with the fewest steps, as the ``init`` call that selects it."""
  if not settings:
    return "none of the candidates meets it"
  s = min(settings, key=lambda s: _fin(big[s], "steps").mean())
  names = ("eps", "delta", "levels")
  args = ", ".join(f"{k}={v:g}" for k, v, p in zip(names, s, paper, strict=True) if v != p)
  return f"`matching.init(servers, {args})`"


def _grid_upper(runs: list[dict]) -> str:
  """In how many seeds a request is above level 0 at the end, and its chain's excess share."""
  above = [r for r in runs if sum(r["final"]["level_count"][1:]) > 0]
  shares = [100 * r["final"]["components"]["upper_share"] for r in above]
  text = f"{len(above)} of {len(runs)} seeds"
  return text + (f", its chain holding {span(shares, lambda x: f'{x:.0f}')}% of the excess"
                 if above else "")


@register("matching_diagnosis")
def matching_diagnosis() -> dict[str, str]:
  """Issue 16's diagnosis (``experiments.matching_diagnosis``, recorded under
  ``docs/results/matching_incremental/diagnosis/``)."""
  d = load("matching_incremental", "diagnosis")
  cfg, paper = d["config"], (0.2, 0.001, 5)
  grid, big = _by_setting(d["grid"]), _by_setting(d["big"])
  base_steps = _fin(grid[paper], "steps").mean()
  edge = lambda r: r["final"]["opt"] / r["final"]["k"]  # noqa: E731
  grows = []
  for s, runs in grid.items():
    ratio = _fin(runs, "ratio")
    grows.append([_setting(s) + (" (paper)" if s == paper else ""), f"{runs[0]['y_max0']:.0f}",
                  f"{f(ratio.mean(), 3)} ({minmax(ratio, lambda x: f(x, 3))})",
                  f"{g(_fin(runs, 'steps').mean() / base_steps, 2)}x",
                  ", ".join(f(r["final"]["unit"] / edge(r), 3) for r in runs),
                  ", ".join(str(sum(r["final"]["level_count"][1:])) for r in runs)])
  brows, meets = [], {}
  for s, runs in big.items():
    ratio = _fin(runs, "ratio")
    meets[s] = bool(np.all(ratio <= 1.05))
    brows.append([_setting(s) + (" (paper)" if s == paper else ""),
                  ", ".join(f(x, 3) for x in ratio), f(ratio.mean(), 3),
                  f"{g(_fin(runs, 'steps').mean() / _fin(big[paper], 'steps').mean(), 2)}x",
                  secs(float(np.mean([r["time_s"] for r in runs]))),
                  ", ".join(f(r["final"]["unit"] / edge(r), 3) for r in runs),
                  f"{int(np.sum(ratio <= 1.05))}/{len(ratio)}"])
  fams: dict[str, list[tuple[dict, dict]]] = {}
  for r, s in zip(d["trace"], d["trace_summary"], strict=True):
    fams.setdefault(r["family"], []).append((r, s))
  trows = []
  for fam, pairs in fams.items():
    at = lambda frac, key, pairs=pairs: np.array([s["at"][frac][key] for _, s in pairs])  # noqa: E731
    late = [sum(x > 0.9 for x in s["doublings_at"]) for _, s in pairs]
    end = at("1.0", "ratio")
    trows.append([FAMILY[fam],
                  *[f(at(x, "ratio").mean(), 3) for x in ("0.5", "0.9", "0.95")],
                  f"{f(end.mean(), 3)} ({minmax(end, lambda x: f(x, 3))})",
                  span(late, lambda x: f"{x:.0f}"),
                  f(at("1.0", "omega_over_opt").mean(), 1),
                  f"{f(at('0.5', 'dual_over_edge').mean(), 1)}; "
                  f"{f(at('1.0', 'dual_over_edge').mean(), 0)}",
                  f(at("1.0", "unit_over_edge").mean(), 2),
                  f(at("1.0", "excess_units_per_edge").mean(), 2),
                  span([s["checkpoints_above_level0"] for _, s in pairs], lambda x: f"{x:.0f}")
                  + f" of {pairs[0][0]['points']}",
                  minmax([100 * r["final"]["components"]["top1_share"] for r, _ in pairs],
                         lambda x: f"{x:.0f}") + "% ("
                  + minmax([r["final"]["components"]["top1_size"] for r, _ in pairs],
                           thousands) + " requests)"])
  levels = [s for s in grid if s[:2] == paper[:2]]
  same = all(_fin(grid[s], "cost").tolist() == _fin(grid[paper], "cost").tolist() for s in levels)
  above_end = [sum(r["final"]["level_count"][1:]) for r in d["trace"]]
  uni = [s for r, s in zip(d["trace"], d["trace_summary"], strict=True) if r["family"] == "uniform"]
  clu = [s for r, s in zip(d["trace"], d["trace_summary"], strict=True)
         if r["family"] == "clustered"]
  cands = [s for s in big if s != paper]
  # grid runs of one seed ending at the same level-0 unit with every request at level 0
  twins: dict[tuple, list[float]] = {}
  for r in d["grid"]:
    if sum(r["final"]["level_count"][1:]) == 0:
      twins.setdefault((r["seed"], float(f"{r['final']['unit']:.6g}")), []).append(
          r["final"]["cost"])
  twins = {k: v for k, v in twins.items() if len(v) > 1}
  units = [r["final"]["unit"] / edge(r) for r in d["grid"]]
  return {
      "grid_n": thousands(cfg["grid_n"]), "grid_seeds": str(cfg["grid_seeds"]),
      "big_n": thousands(cfg["big_n"]), "big_seeds": str(cfg["big_seeds"]),
      "trace_n": thousands(cfg["trace_n"]), "trace_seeds": str(cfg["trace_seeds"]),
      "points": str(cfg["points"]),
      "wall": seconds(d["compute_time_s"]),
      "grid_table": table(["setting", "y_max(0)", "cost / OPT at n", "steps (x paper)",
                           "final unit / mean optimal edge, per seed",
                           "requests above level 0 at n, per seed"], grows),
      "big_table": table(["setting", "cost / OPT at n, per seed", "mean", "steps (x paper)",
                          "time (shared CPU)", "final unit / mean optimal edge",
                          "seeds within 1.05"], brows),
      "trace_table": table(["family", "cost / OPT 0.5n", "0.9n", "0.95n", "n",
                            "omega doublings after 0.9n", "omega / OPT at n",
                            "largest optimal dual / mean edge, 0.5n; n",
                            "unit / mean edge at n", "excess per edge at n (units)",
                            "checkpoints with a request above level 0",
                            "largest chain at n: share of the excess (size)"], trows),
      "levels_same": "the same final matching" if same else "different final matchings",
      "levels_list": ", ".join(str(s[2]) for s in sorted(levels, key=lambda s: s[2])),
      "above_end": span(above_end, lambda x: f"{x:.0f}"),
      "trace_upper": span([100 * s["max_upper_share"] for s in d["trace_summary"]],
                          lambda x: f"{x:.0f}") + "%",
      "grid_upper": _grid_upper(grid[paper]),
      "big_same": ("end in the same matching on every seed (the same final unit)"
                   if len(cands) > 1 and all(_fin(big[s], "cost").tolist()
                                             == _fin(big[cands[0]], "cost").tolist()
                                             for s in cands)
                   else "end in different matchings"),
      "cheapest": _cheapest([s for s in cands if meets[s]], big, paper),
      "candidates": " and ".join(_setting(s) for s in cands),
      "verdict": ("; ".join(f"{_setting(s)}: {'meets' if meets[s] else 'misses'} it "
                            f"({minmax(_fin(big[s], 'ratio'), lambda x: f(x, 3))})"
                            for s in cands)),
      "paper_big": minmax(_fin(big[paper], "ratio"), lambda x: f(x, 3)),
      "uni_dual": f"{f(np.mean([s['at']['0.5']['dual_over_edge'] for s in uni]), 1)} -> "
                  f"{f(np.mean([s['at']['1.0']['dual_over_edge'] for s in uni]), 0)}",
      "clu_dual": f"{f(np.mean([s['at']['0.5']['dual_over_edge'] for s in clu]), 1)} -> "
                  f"{f(np.mean([s['at']['1.0']['dual_over_edge'] for s in clu]), 0)}",
      "uni_unit": f(np.mean([s["at"]["1.0"]["unit_over_edge"] for s in uni]), 2),
      "clu_unit": f(np.mean([s["at"]["1.0"]["unit_over_edge"] for s in clu]), 2),
      "twins": f"{sum(len(set(v)) == 1 for v in twins.values())} of {len(twins)}",
      "twin_runs": str(sum(len(v) for v in twins.values())),
      "grid_units": span(units, lambda x: f(x, 3)),
      "grid_per_edge": span([r["final"]["excess_units_per_edge"] for r in d["grid"]],
                            lambda x: f(x, 2)),
      "steps_factor": f"{cfg['max_steps_factor']:g}",
      "big_candidates": str(cfg["big_candidates"]),
      "grid_dual": f(np.mean([r["final"]["exact_u_max"] / edge(r) for r in grid[paper]]), 0),
      "uni_dual_end": f(np.mean([s["at"]["1.0"]["dual_over_edge"] for s in uni]), 0),
      "grid_ratios": span([r["final"]["ratio"] for r in d["grid"]], lambda x: f(x, 3)),
  }


# ---------------------------------------------------------------------------
# Flow Actor-Critic (docs/methods/flow_actor_critic.md)


def _g3pm(per_seed) -> str:
  """``mean ± sample std``, 3 and 2 significant digits."""
  return pm(per_seed, g, lambda x: g(x, 2))


@register("flow_actor_critic")
def flow_actor_critic() -> dict[str, str]:
  full, og = load("flow_actor_critic", "full"), load("flow_actor_critic", "ogbench")
  benches = [load("flow_actor_critic", "bench"),
             load("run_all", "quick", "bench_flow_actor_critic")]
  arms = {r["arm"]: r["final"] for r in full["runs"]}
  cols = ("critic/q_pi_mean", "critic/q_pi_max", "critic/q_pi_pos_frac", "penalty/w_mean",
          "eval/success", "eval/return")
  rows = [[arm] + [_g3pm(fin[c]["per_seed"]) if c in fin else "" for c in cols]
          for arm, fin in arms.items()]
  seeds = lambda arm, key: np.asarray(arms[arm][key]["per_seed"])  # noqa: E731
  ogarms = {r["arm"]: r["final"] for r in og["runs"]}
  b, q = benches
  return {
      "seeds": str(full["config"]["seeds"]),
      "wall": seconds(full["wall_time_s"]),
      "transitions": thousands(sum(full["dataset_sizes"].values())),
      "table": table(["arm", "Q(s,pi) mean", "Q(s,pi) max", "frac Q > 0", "mean w", "success",
                      "return"], rows),
      "no_penalty_q": f"{seeds('no_penalty', 'critic/q_pi_mean').mean():.0f}",
      "no_penalty_return": f"{seeds('no_penalty', 'eval/return').mean():.0f}",
      "penalty_only_success": minmax(seeds("penalty_only", "eval/success")),
      "fac_success": f(seeds("fac", "eval/success").mean()),
      "fql_success": f(seeds("fql", "eval/success").mean()),
      "bench_setup": f"{b['seeds']} seeds x {thousands(b['steps'])} steps",
      "bench_scan": f"{b['scan_seed_steps_per_s']:.0f}",
      "bench_loop": f"{b['loop_seed_steps_per_s']:.0f}",
      "bench_ratio": f"{b['ratio']:.2f}",
      "quick_scan": f"{q['scan_seed_steps_per_s']:.0f}",
      "quick_loop": f"{q['loop_seed_steps_per_s']:.0f}",
      "quick_ratio": f"{q['ratio']:.2f}",
      # the profile of one chunk (bench --profile-steps): what the scan can remove
      "profile_steps": thousands(b["profile"]["steps"]),
      "profile_overhead": pct(b["profile"]["share"]["loop control"]
                              + b["profile"]["share"]["sampling"]),
      "profile_density": pct(b["profile"]["share"]["density"]),
      "profile_distill": pct(b["profile"]["share"]["distillation"]),
      "profile_rest": pct(b["profile"]["share"]["critic+actor+Adam"]),
      "loop_overhead": pct(1 - b["scan_s"] / b["loop_s"]),
      "quick_setup": (f"{thousands(q['steps'])} steps per seed, nets "
                      f"{' x '.join(str(h) for h in q['hidden'])}"),
      "og_q_max": ", ".join(f"{g(ogarms[a]['critic/q_pi_max']['mean'], 2)} ({a})"
                            for a in ("no_penalty", "penalty_only", "fac", "fql")),
      "og_pos_frac": g(100 * max(max(fin["critic/q_pi_pos_frac"]["per_seed"])
                                 for fin in ogarms.values()), 2),
  }


# ---------------------------------------------------------------------------
# DIPPER (docs/methods/dipper.md)

_ARM = {"flat": "FLAT", "hier": "HIER", "dipper_no_v": "DIPPER without V"}


def _dipper_runs(result: dict) -> dict[tuple[str, str, float], dict]:
  """``(task, arm, lambda) -> run``; sweep runs under arm ``sweep``."""
  return {(r["task"], "sweep" if r.get("sweep") else r["arm"], r["lam"]): r
          for r in result["runs"]}


def _rate(v: float) -> str:
  """A success rate: two decimals, or two significant digits below 0.1."""
  return f(v) if v == 0 or abs(v) >= 0.1 else g(v, 2)


@register("dipper")
def dipper() -> dict[str, str]:
  full, quick, bench = load("dipper", "full"), load("dipper", "quick"), load("dipper", "bench")
  runs = _dipper_runs(full)
  main = {(t, a): r for (t, a, _), r in runs.items() if a != "sweep"}
  seeds = lambda r, k: np.asarray(r["final"][k]["per_seed"], np.float64)  # noqa: E731
  mean = lambda r, k: float(seeds(r, k).mean())  # noqa: E731
  rows = []
  for task in ("maze", "push"):
    group = [main[(task, a)] for a in ("flat", "hier", "dipper_no_v")]
    group.append(main[(task, "dipper")])
    if task == "maze":
      group += [r for (t, a, lam), r in sorted(runs.items(), key=lambda kv: kv[0][2])
                if a == "sweep" and t == task and lam > full["config"]["lam"]]
    best = max(mean(r, "eval/success") for r in group)
    for r in group:
      name = (_ARM.get(r["arm"]) if r["arm"] != "dipper" else f"DIPPER (lambda {r['lam']:g})")
      succ = pm(seeds(r, "eval/success"), _rate, lambda v: g(v, 1))
      cells = [task, name, f"**{succ}**" if mean(r, "eval/success") == best else succ,
               _rate(mean(r, "train/success"))]
      if r["arm"] == "flat":
        cells += [""] * 4
      else:
        cells += [pm(seeds(r, "eval/subgoal_distance"), lambda v: g(v, 2), lambda v: g(v, 1)),
                  pm(seeds(r, "eval/lower_q"), g, lambda v: g(v, 2)),
                  f(mean(r, "eval/subgoal_in_wall")) if task == "maze" else "",
                  f(mean(r, "eval/subgoal_step"))]
      rows.append(cells)
  steps = {t: thousands(main[(t, "flat")]["history"]["env_steps"][-1][0]) for t in ("maze", "push")}
  pd, ph, pf = (main[("push", a)] for a in ("dipper", "hier", "flat"))
  md, mn = main[("maze", "dipper")], main[("maze", "dipper_no_v")]
  sweep = {lam: r for (t, a, lam), r in runs.items() if a == "sweep"}
  n = len(seeds(pd, "eval/success"))
  wins = lambda a, b, k: int(np.sum(seeds(a, k) > seeds(b, k)))  # noqa: E731
  qruns = _dipper_runs(quick)
  qpush = {a: r for (t, a, _), r in qruns.items() if t == "push" and a != "sweep"}
  qsweep = sorted((r for (_, a, _), r in qruns.items() if a == "sweep"), key=lambda r: r["lam"])
  qc = quick["config"]
  sps, ratio = bench["steps_per_s"], bench["ratio_to_point_robot"]
  env = lambda k: f"{g(sps[k] / 1e6)} M"  # noqa: E731
  return {
      "seeds": str(full["config"]["seeds"]),
      "wall": seconds(full["wall_time_s"]),
      "maze_steps": steps["maze"],
      "push_steps": steps["push"],
      "table": table(["task", "arm", "success", "train success", "subgoal distance", "lower Q",
                      "subgoals in walls", "step length"], rows),
      "push_dipper": f(mean(pd, "eval/success")),
      "push_hier": f(mean(ph, "eval/success")),
      "push_flat": g(mean(pf, "eval/success"), 2),
      "push_vs_flat": f"{wins(pd, pf, 'eval/success')} of {n}",
      "push_vs_hier": f"{wins(pd, ph, 'eval/success')} of {n}",
      "maze_zero": ("0 in every seed" if not np.any(np.r_[seeds(md, "eval/success"),
                                                          seeds(mn, "eval/success")])
                    else f"{f(mean(md, 'eval/success'))} (lambda 1) and "
                         f"{f(mean(mn, 'eval/success'))} (lambda 0)"),
      "maze_flat": f(mean(main[("maze", "flat")], "eval/success")),
      "maze_hier": f(mean(main[("maze", "hier")], "eval/success")),
      "maze_train": span([100 * mean(r, "train/success") for r in (mn, md)], lambda v: f"{v:.0f}")
                    + "%",
      "maze_logp": f(mean(md, "high/logp")),
      "maze_step_cells": span([11 * mean(r, "eval/subgoal_step") for r in (mn, md)],
                              lambda v: g(v, 2)),
      "push_dist": f"{f(mean(pd, 'eval/subgoal_distance'))} vs "
                   f"{f(mean(ph, 'eval/subgoal_distance'))}",
      "push_q": f"{g(mean(pd, 'eval/lower_q'))} vs {g(mean(ph, 'eval/lower_q'))}",
      "maze_reach": f"{f(mean(md, 'eval/subgoal_distance'))}, {g(mean(md, 'eval/lower_q'))}",
      "value_maze": f"{g(mean(md, 'eval/success'), 1)} vs {g(mean(mn, 'eval/success'), 1)}",
      "value_push": f"{f(mean(pd, 'eval/success'), 3)} vs "
                    f"{f(mean(main[('push', 'dipper_no_v')], 'eval/success'), 3)}, higher in "
                    f"{wins(pd, main[('push', 'dipper_no_v')], 'eval/success')} of {n} seeds",
      "lam10": pm(seeds(sweep[10.0], "eval/success"), lambda v: f(v), lambda v: f(v)),
      "lam10_walls": f(mean(sweep[10.0], "eval/subgoal_in_wall")),
      "lam100_walls": f"{100 * mean(sweep[100.0], 'eval/subgoal_in_wall'):.0f}%",
      "lam100_step": f(mean(sweep[100.0], "eval/subgoal_step")),
      "quick_setup": (f"{qc['seeds']} seeds, {qc['iterations']} iterations x "
                      f"{qc['num_envs']} episodes, nets {' x '.join(map(str, qc['hidden']))}"),
      "quick_wall": seconds(quick["wall_time_s"]),
      "quick_push": ", ".join(
          f"{_ARM.get(a, 'DIPPER')} {f(mean(r, 'eval/success'))} "
          f"(train {f(mean(r, 'train/success'))})" for a, r in qpush.items()),
      "quick_sweep": ", ".join(
          f"{name} {f(mean(qsweep[0], k))} -> {f(mean(qsweep[-1], k))}"
          for k, name in (("eval/subgoal_in_wall", "subgoals in walls"),
                          ("eval/subgoal_step", "step length")))
                     + f" (lambda {qsweep[0]['lam']:g} -> {qsweep[-1]['lam']:g})",
      "bench_setup": f"{thousands(bench['envs'])} environments x {thousands(bench['steps'])}",
      "bench_robot": env("PointRobot-misc"),
      "bench_maze": f"{env('PointMaze')} ({f(ratio['PointMaze'])}x)",
      "bench_push": f"{env('PointPush')} ({f(ratio['PointPush'])}x)",
      "bench_grid": f"{env('PointMaze (grid obs)')} ({f(ratio['PointMaze (grid obs)'])}x)",
      **_dipper_diagnosis(load("dipper", "diagnosis")),
  }


def _dipper_diagnosis(diag: dict) -> dict[str, str]:
  """Issue 16's evaluation diagnosis (``experiments.dipper --diagnose-eval``): each number
  is the mean over seeds, as a range over the diagnosed lambdas."""
  runs = list(diag["diagnosis"].values())
  cfg = diag["config"]
  over = lambda get, fmt=f: span([float(np.mean(get(r))) for r in runs], fmt)  # noqa: E731
  grid = lambda name, k="success": over(lambda r: r["grid"][name][k])  # noqa: E731
  pol = lambda k, scale=1.0, fmt=f: over(lambda r: np.multiply(r["policy"][k], scale), fmt)  # noqa: E731
  return {
      "diag_setup": (f"{cfg['seeds']} seeds, {cfg['iterations']} iterations x "
                     f"{cfg['num_envs']} episodes, nets {' x '.join(map(str, cfg['hidden']))}, "
                     f"lambda {' and '.join(diag['diagnosis'])}"),
      "diag_command": diag["provenance"]["command"],
      "diag_recorded": (f"{over(lambda r: r['recorded']['eval/success'])} (train "
                        f"{over(lambda r: r['recorded']['train/success'])})"),
      "diag_mean_det": grid("high mean, low det"),
      "diag_mean_stoch": grid("high mean, low stoch"),
      "diag_sample_det": grid("high sample, low det"),
      "diag_sample_stoch": grid("high sample, low stoch"),
      "diag_uniform_det": grid("high uniform, low det"),
      "diag_untrained_det": grid("high untrained, low det"),
      "diag_std": pol("std"),
      "diag_abs_mean": pol("abs_mean"),
      "diag_spread_cells": pol("mean_subgoal_spread", 11.0),
      "diag_sample_cells": pol("mean_to_sample", 11.0, lambda v: f(v, 1)),
  }


# ---------------------------------------------------------------------------
# Fractal convergence of GD (docs/methods/fractal_gd.md)


def _fractal_quick_gap(full: dict, quick: dict) -> str:
  """How far the quick run's mean boundary dimensions sit from the full run's: the largest
  gap over the maps, in the quick run's sample stds over slices."""
  def dims(r):
    out = {}
    for m in r["maps"]:
      out.setdefault((m["lam"], m["eta_frac"]), []).append(m["boundary_dimension"])
    return out
  q, fl = dims(quick), dims(full)
  gaps = [abs(np.mean(q[k]) - np.mean(fl[k])) / std(q[k]) for k in q if k in fl]
  return (f"{quick['config']['resolution']}^2 maps; its boundary dimensions lie within "
          f"{g(max(gaps), 2)} of its own sample stds of these")


@register("fractal_gd")
def fractal_gd() -> dict[str, str]:
  r, bench = load("fractal_gd", "full"), load("fractal_gd", "bench")
  gaps = [100 * c["rel_gap"] for c in r["critical_step"]]
  above = any(c["bisection_lo"] > c["formula"] for c in r["critical_step"])

  def dims(lam):
    out = []
    for frac in r["config"]["map_fracs"]:
      d = [m["boundary_dimension"] for m in r["maps"] if m["lam"] == lam and m["eta_frac"] == frac]
      out.append(f"{pm(d, lambda v: f(v, 3))} (`{'eta = ' if not out else ''}{frac:g} eta*`)")
    return ", ".join(out)

  sens = {lam: [s for s in r["sensitivity"] if s["lam"] == lam] for lam in (0.0, 0.3)}
  s0 = sens[0.0]
  lo = s0[0]
  upper = [s for s in s0 if s["eta_frac"] >= 0.5]
  pct = lambda v: g(100 * v, 2)  # noqa: E731
  bal = {b["eta_frac"]: b for b in r["balance"]}
  picks = (0.3, 0.9, 0.995)
  pairs = r["config"]["pairs"]
  rows = [
      [f"critical step, formula vs bisection ({len(gaps)} cases of `y`, `lam`)",
       f"bisection brackets within {g(min(gaps), 2)}% to {g(max(gaps), 1)}% of the formula, "
       + ("sometimes above it" if above else "never above it")
       + " (convergence slows near `eta*` and the bisection runs finitely many steps)", "equal"],
      ["boundary dimension, `lam = 0`", dims(0.0), "about 1 (smooth)"],
      ["boundary dimension, `lam = 0.3`", dims(0.3), "> 1 (fractal)"],
      [f"start pairs 1e-6 apart reaching minimizers 1e-3 apart, `lam = 0` ({pairs // 1024}k "
       "pairs)",
       f"{pct(lo['different_minimizer'])}% at `{lo['eta_frac']:g} eta*`, "
       f"{span([s['different_minimizer'] for s in upper], pct)}% from `0.5 eta*` to "
       f"`{upper[-1]['eta_frac']:g} eta*`; 99th-percentile amplification of the offset "
       f"{g(lo['amplification_p99'], 2)}x at `{lo['eta_frac']:g} eta*`, "
       f"{span([s['amplification_p99'] for s in upper], lambda v: f'{v:.0f}')}x from "
       "`0.5 eta*`", "sensitive near `eta*`"],
      ["same, `lam = 0.3`",
       f"{span([s['different_minimizer'] for s in sens[0.3]], lambda v: f(100 * v))}% "
       f"(amplification {span([s['amplification_p99'] for s in sens[0.3]], lambda v: g(v, 2))}x "
       "at the 99th percentile): the sensitivity there is the fractal converge / diverge "
       "boundary, not the choice of minimizer", ""],
      ["balancedness at convergence, `lam = 0`",
       "max abs " + " / ".join(g(bal[p]["abs_balance_max"], 2) for p in picks)
       + " at `eta/eta* = " + " / ".join(f"{p:g}" for p in picks) + "`, "
       + ("always inside" if all(b["abs_balance_max"] <= b["stability_bound"]
                                 for b in r["balance"]) else "not always inside")
       + " the stability bound `sqrt(1/eta^2 - 4y^2)` ("
       + " / ".join(g(bal[p]["stability_bound"], 2) for p in picks)
       + "); correlation with the start's balancedness (conserved by gradient flow) "
       + " / ".join(f(bal[p]["corr_with_start"]) for p in picks), "no simple implicit bias"],
  ]
  b = bench["rows"]
  return {
      "resolution": str(r["config"]["resolution"]),
      "quick_gap": _fractal_quick_gap(r, load("fractal_gd", "quick")),
      "slices": str(r["config"]["seeds"]),
      "wall": seconds(r["wall_time_s"]),
      "table": table(["quantity", "measured", "expected"], rows),
      "different_minimizer": span([100 * s["different_minimizer"] for s in upper],
                                  lambda v: g(v, 1)),
      "bench_steps": thousands(bench["max_steps"]),
      "bench_times": " / ".join(f(x["reference_s"], 3) + " s" for x in b),
      "bench_sizes": " / ".join(f"{x['resolution']}^2" for x in b),
      "bench_speedups": " / ".join(f"{x['reference_speedup']:.0f}x" for x in b),
  }


# ---------------------------------------------------------------------------
# Training re-evaluation curves (docs/methods/trec.md)

_PLACEMENT = {"start": "start", "predicted_ema": "EMA minimum",
              "predicted_calibrated": "calibrated minimum", "end": "end"}


def _curriculum(result: dict) -> dict[tuple[float, str], dict]:
  """``(slice, arm) -> row`` with per-seed ``hq`` and ``gain`` (end minus this arm)."""
  rows = {(r["slice_frac"], r["arm"]): dict(r) for r in result["curriculum"]}
  for (frac, _), r in rows.items():
    end = np.asarray(rows[(frac, "end")]["hq_loss"]["per_seed"])
    r["hq"] = np.asarray(r["hq_loss"]["per_seed"])
    r["gain"] = end - r["hq"]
  return rows


def _trec_corr(result: dict, which: str, keep: Callable[[dict], bool]) -> list[float]:
  return [c["corr"][which]["pearson_smoothed"] for c in result["trec"]["configs"] if keep(c)]


def _argmin_gap(result: dict, keep: Callable[[dict], bool]) -> float:
  return max(abs(c["argmin_frac"]["calibrated"] - c["argmin_frac"]["measured"])
             for c in result["trec"]["configs"] if keep(c))


@register("trec")
def trec_docs() -> dict[str, str]:
  quick, full = load("trec", "quick"), load("trec", "full")
  rows = []
  for c in quick["trec"]["configs"]:
    e, k, a = c["corr"]["ema"], c["corr"]["calibrated"], c["argmin_frac"]
    rows.append([c["schedule"], f"{c['tau_frac']:g}",
                 f"{f(e['pearson'])} / {f(e['pearson_smoothed'])}",
                 f"{f(k['pearson'])} / {f(k['pearson_smoothed'])}"
                 + (" (fit)" if c["calibration_config"] else ""),
                 " / ".join(f(a[x]) for x in ("measured", "ema", "calibrated"))])
  cur = _curriculum(quick)
  crows = []
  for frac in quick["config"]["slice_fracs"]:
    arms = [r for (fr, _), r in cur.items() if fr == frac]
    best = max(r["gain"].mean() for r in arms)
    for r in arms:
      gain = "0" if r["arm"] == "end" else pm(r["gain"], lambda v: signed(v), lambda v: f(v, 3))
      if r["arm"] != "end" and r["gain"].mean() == best and best > 0:
        gain = f"**{gain}**"
      crows.append([f"{100 * frac:g}%", f"{_PLACEMENT[r['arm']]} ({f(r['start_frac'])} T)",
                    pm(r["hq"], lambda v: f(v, 3)), gain, f(r["general_loss"]["mean"], 3)])
  strong = lambda c: c["tau_frac"] <= 0.1  # noqa: E731
  short = quick["config"]["slice_fracs"][0]
  n = len(cur[(short, "end")]["hq"])
  k = int(np.sum(cur[(short, "predicted_ema")]["gain"] > 0))
  others = lambda rows_, frac: [r for (fr, arm), r in rows_.items()  # noqa: E731
                                if fr == frac and arm != "end"]
  fcur = _curriculum(full)
  fshort, flong = full["config"]["slice_fracs"]
  fema, fcal = fcur[(fshort, "predicted_ema")], fcur[(fshort, "predicted_calibrated")]
  loses = int(np.sum(fema["gain"] < 0))
  nf = len(fema["gain"])
  return {
      "quick_wall": seconds(quick["wall_time_s"]),
      "window": str(quick["trec"]["smooth_window"]),
      "table": table(["schedule", "tau/T", "r, AdamW EMA",
                      "r, calibrated (`phi` fit on constant tau=2T)",
                      "argmin measured / EMA / calibrated"], rows),
      "seeds": str(quick["config"]["seeds"]),
      "curriculum": table(["slice", "placement (start)", "HQ loss", "gain vs end",
                           "general loss"], crows),
      "ema_seeds": f"all {n}" if k == n else f"{k} of {n}",  # seeds whose EMA gain is > 0
      "full_wall": seconds(full["wall_time_s"]),
      "full_steps": thousands(full["config"]["steps"]),
      "full_trec_seeds": str(full["config"]["trec_seeds"]),
      "full_seeds": str(full["config"]["seeds"]),
      "full_strong_r": span(_trec_corr(full, "ema", strong)),
      "full_weak_r": span(_trec_corr(full, "ema", lambda c: not strong(c)), sep=" to "),
      "full_phi": g(full["trec"]["forgetting"], 2),
      "full_cal_r": span(_trec_corr(full, "calibrated", lambda c: True)),
      "full_cal_gap": g(_argmin_gap(full, lambda c: True), 1),
      "full_ema_start": f(fema["start_frac"]),
      "full_ema_loss": pm(-fema["gain"], lambda v: f(v, 3)),
      "full_ema_seeds": "every seed" if loses == nf else f"{loses} of {nf} seeds",
      "full_cal_start": f(fcal["start_frac"]),
      "full_cal_gain": pm(fcal["gain"], lambda v: signed(v), lambda v: f(v, 3)),
      "full_long_end_wins": span([-r["gain"].mean() for r in others(fcur, flong)]),
      "full_long_general": f"{f(fcur[(flong, 'end')]['general_loss']['mean'])} vs "
                           + span([r["general_loss"]["mean"] for r in others(fcur, flong)]),
      "quick_gains": span([r["gain"].mean() for r in others(cur, short)], signed, sep=" to "),
      "quick_setup": (f"{thousands(quick['config']['steps'])} AdamW steps of "
                      f"{quick['config']['batch']} x {quick['config']['seq_len']} tokens, "
                      f"{quick['config']['layers']}-layer transformer, d = "
                      f"{quick['config']['d_model']}, vocab {quick['config']['vocab']}"),
  }


# ---------------------------------------------------------------------------
# alpha-DPO (docs/methods/alpha_dpo.md)

_DPO, _FIXED, _DYN = "Diffusion-DPO", "alpha-DPO (alpha=0.5)", "alpha-DPO (dynamic)"
_METHOD = {_DPO: "Diffusion-DPO", _FIXED: "alpha-DPO (alpha = 0.5)", _DYN: "alpha-DPO (dynamic)"}


def _per_seed(task: dict, key: str, method: str, beta: float, flip: float) -> np.ndarray:
  rows = sorted((r for r in task["rows"] if r["method"] == method and r["beta"] == beta
                 and r["flip"] == flip), key=lambda r: r["seed"])
  return np.asarray([r[key] for r in rows], np.float64)


def _drop(task: dict, method: str, beta: float, flips: list[float]) -> np.ndarray:
  """Per-seed reward drop from the lowest to the highest flip rate."""
  return (_per_seed(task, "reward", method, beta, flips[0])
          - _per_seed(task, "reward", method, beta, flips[-1]))


@register("alpha_dpo")
def alpha_dpo_docs() -> dict[str, str]:
  quick, full = load("alpha_dpo", "quick"), load("alpha_dpo", "full")
  flips = quick["config"]["flips"]
  mix = quick["tasks"]["mixture"]
  rows = []
  for beta in mix["betas"]:
    for m in (_DPO, _FIXED, _DYN):
      rows.append([f"{beta:g}", _METHOD[m]]
                  + [pm(_per_seed(mix, "reward", m, beta, fl), lambda v: f(v, 3)) for fl in flips]
                  + [" / ".join(f(_per_seed(mix, "off_manifold", m, beta, fl).mean(), 3)
                                for fl in flips)])
  lo, hi = mix["betas"][0], mix["betas"][-1]
  d = {(m, b): _drop(mix, m, b, flips) for m in (_DPO, _FIXED, _DYN) for b in mix["betas"]}
  more = [int(np.sum(d[(m, lo)] > d[(_DPO, lo)])) for m in (_FIXED, _DYN)]
  n = len(d[(_DPO, lo)])
  off = lambda m, b: [_per_seed(mix, "off_manifold", m, b, fl).mean() for fl in flips]  # noqa: E731
  fflips = full["config"]["flips"]
  frows, held, cells = [], [], 0
  for name, task in full["tasks"].items():
    for beta in task["betas"]:
      cell = [name, f"{beta:g}"]
      base = _drop(task, _DPO, beta, fflips)
      for m in (_FIXED, _DYN):
        dm = _drop(task, m, beta, fflips)
        less = int(np.sum(dm < base))
        text = f"{f(dm.mean(), 3)} vs {f(base.mean(), 3)} ({less}/{len(dm)})"
        if less == len(dm):
          text = text.replace(f"({less}/{len(dm)})", f"(**{less}/{len(dm)}**)")
          held.append((name, beta, m, task))
        cell.append(text)
        cells += 1
      frows.append(cell)
  held_text = []
  for name, beta, m, task in held:
    a = _per_seed(task, "reward", m, beta, fflips[-1]).mean()
    b = _per_seed(task, "reward", _DPO, beta, fflips[-1]).mean()
    what = "fixed alpha 0.5" if m == _FIXED else "the dynamic alpha"
    held_text.append(f"{what} at beta {beta:g} on the {name}, where it also ends "
                     f"{'lower' if a < b else 'higher'} in reward: {f(a, 3)} vs {f(b, 3)} at "
                     f"{100 * fflips[-1]:.0f}% flipped")
  dyn_held = sum(m == _DYN for _, _, m, _ in held)
  digits = full["tasks"]["digits"]
  digit_sd = [std(_drop(digits, m, b, fflips) - _drop(digits, _DPO, b, fflips))
              for m in (_FIXED, _DYN) for b in digits["betas"]]
  words = {0: "none", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six",
           7: "seven", 8: "eight", 9: "nine", 10: "ten"}
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_steps": str(quick["config"]["tasks"]["mixture"]["finetune_steps"]),
      "quick_batch": str(quick["config"]["tasks"]["mixture"]["batch"]),
      "quick_wall": seconds(quick["wall_time_s"]),
      "pretrained": pm(mix["reference"]["reward"], lambda v: f(v, 3)),
      "quick_table": table(["beta", "method", "0% flipped", "20%", "40%",
                            "off-manifold (0/20/40%)"], rows),
      "lo_drop_dpo": f(d[(_DPO, lo)].mean()),
      "lo_drop_alpha": span([d[(m, lo)].mean() for m in (_FIXED, _DYN)]),
      "lo_seeds": "in every seed" if min(more) == n else f"in {min(more)}-{max(more)} of {n} seeds",
      "hi_drops": f"{f(d[(_DYN, hi)].mean())} vs {f(d[(_DPO, hi)].mean())}",
      "hi_off": span([100 * v for m in (_FIXED, _DYN) for v in off(m, hi)], lambda v: f"{v:.0f}")
                + f"% off-manifold against {100 * np.mean(off(_DPO, hi)):.0f}%",
      "full_wall": seconds(full["wall_time_s"]),
      "full_seeds": str(full["config"]["seeds"]),
      "full_mix_steps": thousands(full["config"]["tasks"]["mixture"]["finetune_steps"]),
      "full_digit_steps": thousands(full["config"]["tasks"]["digits"]["finetune_steps"]),
      "full_table": table(["task", "beta", "alpha = 0.5", "dynamic alpha"], frows),
      "held": f"{words.get(len(held), len(held))} of {words.get(cells, cells)} cells"
              + (f" ({'; '.join(held_text)})" if held_text else ""),
      "dynamic": ("never loses less in every seed" if dyn_held == 0
                  else f"loses less in every seed in {dyn_held} cells"),
      "digit_spread": f"±{span(digit_sd, lambda v: g(v, 1))}",
      "digit_off": f"{100 * np.mean(digits['reference']['off_manifold']):.0f}%",
  }


# ---------------------------------------------------------------------------
# ReCouPLe (docs/methods/recouple.md)

_RC_METHOD = {"bt": "Bradley-Terry", "recouple": "ReCouPLe",
              "recouple_noratio": "ReCouPLe, no ratio penalty"}
_SPLITS = ("id", "ood", "decorrelated", "clean", "new_zero_shot", "new_few_shot")


def _acc(row: dict, split: str) -> np.ndarray | None:
  return None if row.get(split) is None else np.asarray(row[split]["per_seed"], np.float64)


@register("recouple")
def recouple_docs() -> dict[str, str]:
  quick, full = load("recouple", "quick"), load("recouple", "full")
  rows = []
  for st in quick["settings"]:
    for m, row in st["methods"].items():
      rows.append([st["regime"], _RC_METHOD[m]]
                  + [("n/a" if _acc(row, s) is None else pm(_acc(row, s), lambda v: f(v, 3)))
                     for s in _SPLITS])
  q = {st["regime"]: st["methods"] for st in quick["settings"]}
  gain = lambda ms, s: _acc(ms["recouple"], s) - _acc(ms["bt"], s)  # noqa: E731
  paired = lambda ms, s: pm(gain(ms, s), signed, lambda v: f(v, 3))  # noqa: E731
  mean = lambda ms, m, s: f(_acc(ms[m], s).mean())  # noqa: E731
  frows = []
  fs = {(st["regime"], st["shift"]): st["methods"] for st in full["settings"]}
  for (regime, shift), ms in fs.items():
    frows.append([regime, f"{shift:g}"]
                 + [f"{f(_acc(ms['bt'], s).mean(), 3)} / {f(_acc(ms['recouple'], s).mean(), 3)} "
                    f"({paired(ms, s)})" for s in ("ood", "decorrelated", "new_zero_shot")]
                 + [paired(ms, "new_few_shot")])
  shifts = sorted({sh for _, sh in fs})
  strong = shifts[-1]
  # the verdicts: the full run at the quick run's (weaker) shift
  p, a = fs[("partial", shifts[0])], fs[("all", shifts[0])]
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_shift": f"{quick['config']['settings'][0][1]:g}",
      "quick_steps": str(quick["config"]["steps"]),
      "quick_wall": seconds(quick["wall_time_s"]),
      "quick_table": table(["regime", "method", "id", "ood", "decorrelated", "clean",
                            "new task, zero-shot", "new task, 64 labels"], rows),
      "paired": f"partial `ood` {paired(q['partial'], 'ood')}, zero-shot "
                f"{paired(q['partial'], 'new_zero_shot')}; all `ood` {paired(q['all'], 'ood')}, "
                f"zero-shot {paired(q['all'], 'new_zero_shot')}",
      "verdict_shift": f"{shifts[0]:g}",
      "few_shot_bt": mean(p, "bt", "new_few_shot"),
      "noratio_ood": span([_acc(ms["recouple_noratio"], "ood").mean()
                           - _acc(ms["recouple"], "ood").mean() for ms in fs.values()],
                          lambda v: signed(v), sep=" to "),
      "full_seeds": str(full["config"]["seeds"]),
      "full_steps": thousands(full["config"]["steps"]),
      "full_shifts": " and ".join(f"{s:g}" for s in shifts),
      "full_wall": seconds(full["wall_time_s"]),
      "full_table": table(["regime", "m", "ood: BT / ReCouPLe (gain)",
                           "decorrelated: BT / ReCouPLe (gain)",
                           "new task zero-shot: BT / ReCouPLe (gain)",
                           "new task, 64 labels (gain)"], frows),
      "strong_shift": f"{strong:g}",
      "strong_bt": f(_acc(fs[("partial", strong)]["bt"], "ood").mean()),
      "strong_rc": f(_acc(fs[("partial", strong)]["recouple"], "ood").mean()),
      "strong_all": span([_acc(fs[("all", strong)][m], "ood").mean() for m in ("bt", "recouple")]),
      "ood": f"{mean(p, 'recouple', 'ood')} against {mean(p, 'bt', 'ood')}",
      "decorrelated": f"{mean(p, 'recouple', 'decorrelated')} against "
                      f"{mean(p, 'bt', 'decorrelated')}",
      "zero_shot": f"{mean(p, 'recouple', 'new_zero_shot')} against "
                   f"{mean(p, 'bt', 'new_zero_shot')}",
      "rc_ood": mean(p, "recouple", "ood"),
      "clean": mean(p, "recouple", "clean"),
      "all_gain": signed(gain(a, "ood").mean(), 2),
      "hinge": f"{f(p['recouple_noratio']['train_terms']['ratio']['mean'])} to "
               f"{f(p['recouple']['train_terms']['ratio']['mean'])}",
  }


# ---------------------------------------------------------------------------
# Test-Time Matching (docs/methods/ttm.md)

_STAGE = {"before": "pre-trained", "after": "after TTM", "oracle": "oracle fine-tune"}


def _ttm(result: dict, noise: float, stage: str, metric: str) -> np.ndarray:
  runs = sorted((r for r in result["runs"] if r["order_noise"] == noise), key=lambda r: r["seed"])
  return np.asarray([r[stage][metric] for r in runs], np.float64)


@register("ttm")
def ttm_docs() -> dict[str, str]:
  quick, full = load("ttm", "quick"), load("ttm", "full")
  fmt = lambda v: f(v, 3)  # noqa: E731
  rows = [[f"{noise:g}", _STAGE[stage]]
          + [pm(_ttm(quick, noise, stage, m), fmt) for m in ("text", "image", "group",
                                                             "group_match")]
          for noise in quick["config"]["order_noise"] for stage in _STAGE]
  frows = [[f"{noise:g}", _STAGE[stage]]
           + [pm(_ttm(full, noise, stage, m), fmt) for m in ("group", "group_match")]
           for noise in full["config"]["order_noise"] for stage in ("before", "after")]
  lo, hi = full["config"]["order_noise"][0], full["config"]["order_noise"][-1]
  up = lambda noise: (_ttm(full, noise, "after", "group_match")  # noqa: E731
                      - _ttm(full, noise, "before", "group_match"))
  d_lo, d_hi = up(lo), up(hi)
  worst = int(np.argmin(d_hi))
  n = len(d_lo)
  noises = sorted(quick["config"]["order_noise"], reverse=True)
  return {
      "quick_seeds": str(quick["config"]["seeds"]),
      "quick_groups": thousands(quick["config"]["groups"]),
      "quick_rounds": f"{quick['config']['rounds']} rounds x {quick['config']['epochs']} epochs",
      "quick_wall": seconds(quick["wall_time_s"]),
      "quick_table": table(["order noise", "stage", "text", "image", "group score",
                            "GroupMatch"], rows),
      "full_seeds": str(full["config"]["seeds"]),
      "full_groups": thousands(full["config"]["groups"]),
      "full_rounds": f"{full['config']['rounds']} rounds x {full['config']['epochs']} epochs",
      "full_wall": seconds(full["wall_time_s"]),
      "full_table": table(["order noise", "stage", "group score", "GroupMatch"], frows),
      "reveal": span([_ttm(quick, nz, "before", "group_match").mean() for nz in noises]),
      "turns": ", ".join(f"{f(_ttm(quick, nz, 'before', 'group').mean())} → "
                         f"{f(_ttm(quick, nz, 'after', 'group').mean())}" for nz in noises),
      "lo_gm": f"{fmt(_ttm(full, lo, 'before', 'group_match').mean())} → "
               f"{fmt(_ttm(full, lo, 'after', 'group_match').mean())}",
      "lo_up": (f"up in all {n} seeds" if np.all(d_lo > 0)
                else f"up in {int(np.sum(d_lo > 0))} of {n} seeds")
               + f", {span(d_lo, lambda v: signed(v, 2), sep=' to ')}",
      "hi_counts": f"up in {int(np.sum(d_hi > 0))} seeds and down in {int(np.sum(d_hi < 0))}",
      "hi_gm": f"{fmt(_ttm(full, hi, 'before', 'group_match').mean())} → "
               f"{fmt(_ttm(full, hi, 'after', 'group_match').mean())}",
      "hi_worst": f"{f(_ttm(full, hi, 'before', 'group_match')[worst])} → "
                  f"{f(_ttm(full, hi, 'after', 'group_match')[worst])}",
  }


@register("lm_toolkit")
def lm_toolkit_docs() -> dict[str, str]:
  bench = load("lm_toolkit", "bench")
  tr, de = bench["train"], bench["decode"]
  m = bench["machine"]
  rows = [[f"training step ({tr['shape']})", f"{thousands(tr['ours_tokens_per_s'])} tokens/s",
           f"{thousands(tr['plain_tokens_per_s'])} tokens/s (plain nnx)",
           f"{f(tr['ratio_median'], 3)} ({span(tr['ratio_range'], lambda v: f(v, 3))})"],
          [f"greedy decoding of {de['new_tokens']} tokens to {de['context']} (batch "
           f"{de['batch']})", f"{f(float(np.median(de['cache_s'])), 3)} s (KV cache)",
           f"{f(float(np.median(de['recompute_s'])), 3)} s (recompute prefix)",
           f"{f(de['ratio_median'], 3)} ({span(de['ratio_range'], lambda v: f(v, 3))}); "
           f"cache {f(1 / de['ratio_median'], 1)}x faster"]]
  cfg = bench["config"]
  return {"bench_table": "\n" + table(["timing", "ours", "anchor",
                                       "ours / anchor: median (min-max)"], rows)
          + f"\n\n{cfg['repeats']} interleaved rounds of {cfg['inner']} calls after "
            f"compiling, backend {m['backend']}; the cached "
            f"and recomputed decodings gave the same tokens: {de['same_tokens']}. Record: "
            "`docs/results/lm_toolkit/bench/`.\n"}


def _adaback_report(record: dict) -> str:
  from experiments import adaback  # noqa: PLC0415 (the experiment's claims and configs)

  runs, cfg = record["runs"], record["config"]
  final = lambda arm, key: np.array([r[arm][-1][key] for r in runs])  # noqa: E731
  rows = [[arm, pm(final(arm, "valid")), pm(final(arm, "reward"))] for arm in adaback.ARMS]
  return ("\n" + f"L = {cfg['length']}, {cfg['layers']} layers, d = {cfg['d_model']}, "
          f"{thousands(cfg['train'])} prompts, {thousands(cfg['rl_steps'])} iterations of "
          f"{cfg['prompts_per_step']} x {cfg['group_size']} completions, {cfg['seeds']} seeds, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds at the last evaluation:\n\n"
          + table(["arm", "test full-valid rate", "test reward"], rows) + "\n\n"
          + claims_table(adaback.claims(record)) + "\n")


@register("adaback")
def adaback_docs() -> dict[str, str]:
  out = quick_and_full("adaback", _adaback_report)
  if (record := recorded("adaback", "diagnosis_L4")) is not None:
    out["diagnosis_L4"] = (f"\n`{record['provenance']['command']}` (`docs/results/adaback/"
                           "diagnosis_L4/`): " + _adaback_report(record).lstrip("\n"))
  return out


# ---------------------------------------------------------------------------
# Expert Divergence Learning (docs/methods/expert_divergence.md)


def _edl_table(result: dict) -> str:
  exp = importlib.import_module("experiments.expert_divergence")
  fmt = lambda v: f(v, 4)  # noqa: E731
  rows = []
  for arm in result["arms"]:
    m = result["final"][arm["name"]]
    rows.append([arm["name"].replace("beta", "β"), pm(m["ce"], fmt),
                 pm(exp._paired(result, arm["name"], "ce"), lambda v: signed(v, 4), fmt),
                 pm(m["jsd"], fmt), pm(m["mi"], fmt), pm(m["mi_soft"], fmt),
                 pm(m["load_entropy"], lambda v: f(v, 3))])
  return table(["arm", "held-out CE", "ΔCE vs β = 0 (paired)", "routing JSD",
                "domain-expert MI (top-k)", "MI (soft)", "load entropy"], rows)


def _edl_claims(result: dict) -> str:
  exp = importlib.import_module("experiments.expert_divergence")
  verdict = {True: "yes", False: "no", None: "n/a"}
  return table(["paper's claim", "measured", "held?"],
               [[c.claim, c.measured, verdict[c.held]]
                for c in check_claims(exp.claims(result))])


@register("expert_divergence")
def expert_divergence_docs() -> dict[str, str]:
  quick = load("expert_divergence", "quick")
  qc = quick["config"]
  out = {
      "quick_seeds": str(qc["seeds"]),
      "quick_steps": thousands(qc["steps"]),
      "quick_model": f"{qc['layers']} layers, d = {qc['d_model']}, {qc['experts']} experts "
                     f"top-{qc['top_k']}, {qc['domains']} domains over {qc['vocab']} symbols",
      "quick_wall": seconds(quick["wall_time_s"]),
      "quick_table": _edl_table(quick),
      "quick_claims": _edl_claims(quick),
      "quick_floor": f(np.mean(quick["entropy_rate"]), 3),
      "quick_log_experts": f(quick["log_experts"], 3),
      "quick_load": span([np.mean(quick["final"][a["name"]]["load_entropy"])
                          for a in quick["arms"]], lambda v: f(v, 3)),
  }
  if (full := recorded("expert_divergence", "full")) is not None:
    out["full"] = (f"Full run (`docs/results/expert_divergence/full/`, "
                   f"{full['config']['seeds']} seeds, {thousands(full['config']['steps'])} "
                   f"steps, {seconds(full['wall_time_s'])}):\n\n" + _edl_table(full)
                   + "\n\n" + _edl_claims(full))
  else:
    out["full"] = not_recorded("expert_divergence")
  return out


# ---------------------------------------------------------------------------
# CoCoMix (docs/methods/cocomix.md)


def _ccm_tables(result: dict) -> str:
  exp = importlib.import_module("experiments.cocomix")
  fmt = lambda v: f(v, 4)  # noqa: E731
  rows = [[a["name"], pm(result["final"][a["name"]]["ce"], fmt),
           pm(exp._paired(result, a["name"]), lambda v: signed(v, 4), fmt),
           f"{result['final'][a['name']]['flops_per_step']:.3g}"] for a in result["arms"]]
  verdict = {True: "yes", False: "no", None: "n/a"}
  return (table(["arm", "held-out CE", "ΔCE vs NTP (paired)", "training FLOPs / step"], rows)
          + "\n\n" + table(["paper's claim", "measured", "held?"],
                            [[c.claim, c.measured, verdict[c.held]]
                             for c in check_claims(exp.claims(result))]))


def _ccm_teacher(result: dict) -> str:
  return (f"teacher held-out CE {pm(result['teacher_ce'], lambda v: f(v, 4))}; SAE normalised "
          f"MSE {pm(result['sae_nmse'], lambda v: f(v, 3))}, live latents "
          f"{pm(result['sae_live_fraction'])}")


@register("cocomix")
def cocomix_docs() -> dict[str, str]:
  quick = load("cocomix", "quick")
  qc = quick["config"]
  out = {
      "quick_setting": (f"{qc['seeds']} seeds, {thousands(qc['steps'])} steps, vocab "
                        f"{qc['vocab']}, {qc['states']} HMM states, teacher "
                        f"{qc['teacher_layers']} layers / student {qc['student_layers']} layers, "
                        f"d = {qc['d_model']}, SAE C = {qc['latents']}, k = {qc['k']}, "
                        f"{seconds(quick['wall_time_s'])}"),
      "quick_table": _ccm_tables(quick),
      "quick_teacher": _ccm_teacher(quick),
  }
  if (full := recorded("cocomix", "full")) is not None:
    out["full"] = (f"Full run (`docs/results/cocomix/full/`, {full['config']['seeds']} seeds, "
                   f"{thousands(full['config']['steps'])} steps, "
                   f"{seconds(full['wall_time_s'])}):\n\n" + _ccm_tables(full)
                   + f"\n\n{_ccm_teacher(full)[0].upper()}{_ccm_teacher(full)[1:]}.")
  else:
    out["full"] = not_recorded("cocomix")
  return out





def _sstoken_arms(record: dict) -> str:
  from experiments import sstoken  # noqa: PLC0415 (the experiment's arms)

  runs = record["runs"]
  final = lambda arm, key: np.array([r[arm][-1][key] for r in runs])  # noqa: E731
  rows = [["base (before SFT)", pm(np.array([r["base"]["em"] for r in runs])),
           pm(np.array([r["base"]["ce"] for r in runs])), "", ""]]
  rows += [[arm, pm(final(arm, "em")), pm(final(arm, "ce")),
            pm(final(arm, "train_noise_kept")), pm(final(arm, "train_clean_kept"))]
           for arm in sstoken.ARMS]
  return table(["arm", "exact match", "response CE", "corrupted tokens kept (last chunk)",
                "clean tokens kept"], rows)


def _sstoken_report(record: dict) -> str:
  from experiments import sstoken  # noqa: PLC0415 (the experiment's claims)

  cfg = record["config"]
  return ("\n" + f"{cfg['length']} digits, {cfg['layers']} layers, d = {cfg['d_model']}, "
          f"{thousands(cfg['pretrain_steps'])} pretraining steps, {thousands(cfg['sft'])} SFT "
          f"rows, {thousands(cfg['sft_steps'])} SFT steps of {cfg['batch']}, {cfg['seeds']} "
          f"seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds at the last "
          "evaluation (clean held-out prompts):\n\n" + _sstoken_arms(record) + "\n\n"
          + claims_table(sstoken.claims(record)) + "\n")


@register("sstoken")
def sstoken_docs() -> dict[str, str]:
  out = quick_and_full("sstoken", _sstoken_report)
  for name in ("quick_base1000", "quick_layer0"):
    if (record := recorded("sstoken", name)) is not None:
      out[name] = ("\n" + f"`{record['provenance']['command']}` "
                   f"({seconds(record['wall_time_s'])}):\n\n" + _sstoken_arms(record) + "\n")
  return out


def _sfdd_report(record: dict) -> str:
  from experiments import sfdd  # noqa: PLC0415 (the experiment's claims and table)

  runs, c = record["runs"], record["config"]
  corr = np.array([r["rank_corr_entropy"] for r in runs])
  overlap = np.array([r["overlap_entropy"] for r in runs])
  return ("\n" + f"{c['symbols']} symbols, target {c['target_layers']} layers d = "
          f"{c['target_d']} ({thousands(c['target_steps'])} steps), draft 1 layer d = "
          f"{c['draft_d']}, {thousands(c['samples'])} target samples, {c['epochs']} epochs per "
          f"arm, {c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds "
          "on held-out target samples:\n\n"
          + table(sfdd.TABLE_HEAD, sfdd.table_rows(record)) + "\n\n"
          + f"Rank correlation of the flatness and entropy sample scores: {pm(corr)}; share of "
          f"the flattest 50% also in the highest-entropy 50%: {pm(overlap)}.\n\n"
          + claims_table(sfdd.claims(record)) + "\n")


@register("sfdd")
def sfdd_docs() -> dict[str, str]:
  return quick_and_full("sfdd", _sfdd_report)


def _cascadia_report(record: dict) -> str:
  from experiments import cascadia  # noqa: PLC0415 (the experiment's claims and table)

  c, runs = record["config"], record["runs"]
  flops = np.array([r["flops"] for r in runs])[0]
  service = np.array([r["service_ms"] for r in runs])[0]
  acc = np.array([r["accuracy"] for r in runs])
  q_min = np.array([r["q_min"] for r in runs])
  f3 = lambda x: f(x, 3)  # noqa: E731
  models = ", ".join(f"hidden {list(h)}: {thousands(fl)} FLOPs, s = {service[i]:.3g} ms, "
                     f"accuracy {pm(acc[:, i], f3)}"
                     for i, (h, fl) in enumerate(zip(c["hidden"], flops, strict=True)))
  return ("\n" + f"{c['seeds']} seeds, {c['workers']} workers, alpha = {c['alpha']}, "
          f"lambda_0 = {c['load']} x the largest model's capacity "
          f"({pm([r['rate0'] for r in runs])} req/ms), SLO {c['slo']:g} ms, quality floor "
          f"q_min = {pm(q_min, f3)}, {len(c['grid'])} threshold values, "
          f"{seconds(record['wall_time_s'])}. Models ({thousands(c['steps'])} Adam steps each): "
          f"{models}. Mean ± std over seeds:\n\n"
          + table(cascadia.TABLE_HEAD, cascadia.table_rows(record)) + "\n\n"
          + "Share of the requests reaching each model at lambda_0 (w_1, w_2, w_3): "
          + "; ".join(f"{a} " + ", ".join(pm([r["arms"][a]["workload"][i] for r in runs], f3)
                                          for i in range(len(c["hidden"])))
                      for a in ("cascadia", "routing")) + ".\n\n"
          + claims_table(cascadia.claims(record)) + "\n")


@register("cascadia")
def cascadia_docs() -> dict[str, str]:
  return quick_and_full("cascadia", _cascadia_report)


def _g_nll_report(record: dict) -> str:
  from experiments import g_nll  # noqa: PLC0415 (the experiment's claims and tables)

  runs, c = record["runs"], record["config"]
  per = lambda key: np.array([r[key] for r in runs], np.float64)  # noqa: E731
  questions = c["entities"] * c["relations"]
  corr = [r["length_correct_corr"] for r in runs if r["length_correct_corr"] is not None]
  return ("\n" + f"{thousands(questions)} questions ({c['entities']} entities x "
          f"{c['relations']} relations, {c['words']} answer words), "
          f"{thousands(c['steps'] * c['batch'])} training statements (Zipf exponent "
          f"{c['zipf_a']}, one pass), model {c['layers']} layers d = {c['d_model']}, "
          f"{c['samples']} samples, beam width {c['beam']}, {c['seeds']} "
          f"seed{'s' if c['seeds'] > 1 else ''}, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds. Greedy accuracy "
          f"{pm(per('accuracy'))} (questions with one valid answer {pm(per('accuracy_single'))}, "
          f"with 2-3 {pm(per('accuracy_multi'))}); greedy answers of "
          f"{f(per('greedy_length_mean').mean())} tokens on average, EOS included (std within "
          f"a seed {f(per('greedy_length_std').mean())}); correlation of a greedy answer's "
          f"length with its correctness {pm(corr)}.\n\n"
          + table(g_nll.TABLE_HEAD, g_nll.table_rows(record)) + "\n\n"
          + "Greedy accuracy by how often training saw the question:\n\n"
          + table(g_nll.EXPOSURE_HEAD, g_nll.exposure_rows(record)) + "\n\n"
          + f"The greedy answer is the best beam for {pm(per('greedy_is_beam'))} of the "
          f"questions; G-NLL exceeds the beam's NLL by {pm(per('g_minus_beam_nll'))} nats on "
          f"average. The {c['samples']} samples fall into {pm(per('clusters_mean'))} clusters "
          "per question.\n\n"
          + claims_table(g_nll.claims(record)) + "\n")


def _g_nll_ln_above(record: dict) -> str:
  """``k of n``: the seeds where LN-G-NLL's AUROC is above G-NLL's."""
  above = [r["auroc"]["ln_g_nll"] > r["auroc"]["g_nll"] for r in record["runs"]]
  return f"{sum(above)} of {len(above)}"


@register("g_nll")
def g_nll_docs() -> dict[str, str]:
  out = quick_and_full("g_nll", _g_nll_report)
  quick = f"the quick run's: {_g_nll_ln_above(load('g_nll', 'quick'))}"
  full = recorded("g_nll", "full")
  out["ln_above"] = (quick if full is None
                     else f"{_g_nll_ln_above(full)} full-run seeds ({quick})")
  return out


def _freekv_report(record: dict) -> str:
  from experiments import freekv  # noqa: PLC0415 (the experiment's claims and table)

  c = record["config"]
  steps = sum(phase[2] for phase in c["curriculum"])
  contexts = ", ".join(thousands(phase[0]) for phase in c["curriculum"])
  return ("\n" + f"{c['layers']} layers d = {c['d_model']} ({c['heads']} heads), trained "
          f"{thousands(steps)} steps on contexts {contexts}; evaluated at context "
          f"{thousands(c['context'])} ({c['pairs']} entries, {c['queries']} queries decoded on "
          f"{c['eval_rows']} rows); page {c['page_size']}, budget {c['budget']} tokens; "
          f"{len(record['runs'])} seed(s), {seconds(record['wall_time_s'])}; mean ± std over "
          "seeds:\n\n"
          + table(freekv.TABLE_HEAD, freekv.table_rows(record)) + "\n\n"
          + claims_table(freekv.claims(record)) + "\n")


@register("freekv")
def freekv_docs() -> dict[str, str]:
  from experiments import bench_freekv  # noqa: PLC0415

  out = quick_and_full("freekv", _freekv_report)
  bench = recorded("freekv", "bench")
  out["bench"] = (
      "\nThe benchmark (`python -m experiments.bench_freekv`) is not recorded yet.\n"
      if bench is None else
      f"\nRecord `docs/results/freekv/bench/` ({bench['backend']}, batch "
      f"{bench['config']['batch']}, page {bench['config']['page_size']}, budget "
      f"{bench['config']['budget']} tokens, median of {bench['config']['repeats']} "
      f"interleaved rounds of {bench['config']['inner']} calls; ratio = FreeKV / full, "
      "paired per round, min-max in brackets):\n\n" + bench_freekv.table(bench) + "\n")
  return out


def _planned_diffusion_report(record: dict) -> str:
  from experiments import planned_diffusion as pdx  # noqa: PLC0415 (claims and table)

  c = record["config"]
  return ("\n" + f"K = 1..{c['max_spans']} spans, unit {c['unit']} tokens, three transformers of "
          f"{c['layers']} layers d = {c['d_model']} ({thousands(c['steps'])} steps, batch "
          f"{c['batch']}, {thousands(c['train'])} training problems), {c['test']} test prompts "
          f"per K, {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds "
          "(`pd_r<r>`: denoising steps = ceil(r x longest span); `_tau`: with the confidence "
          "threshold; `mdm_<s>`: pure masked diffusion in s steps):\n\n"
          + table(pdx.TABLE_HEAD, pdx.table_rows(record)) + "\n\n"
          + "Exact match per number of spans:\n\n"
          + table(pdx.per_k_head(record), pdx.per_k_rows(record)) + "\n\n"
          + claims_table(pdx.claims(record)) + "\n")


@register("planned_diffusion")
def planned_diffusion_docs() -> dict[str, str]:
  return quick_and_full("planned_diffusion", _planned_diffusion_report)


def _fastflow_report(record: dict) -> str:
  from experiments import fastflow as ffx  # noqa: PLC0415 (claims and table)

  c = record["config"]
  runs = record["runs"]
  return ("\n" + f"Velocity MLP hidden {tuple(c['hidden'])}, {thousands(c['train_steps'])} "
          f"flow-matching steps; FastFlow bandits learn over {c['warmup']} calls of "
          f"{c['batch']} samples, then {c['eval_batches']} measured calls "
          f"({c['eval_batches'] * c['batch']} samples per method, the same noise for every "
          f"sampler); {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds. FD between two halves "
          f"of the real held-out digits: "
          f"{ffx.pm([r['fd_real_halves'] for r in runs], '.2f')}; yardstick test accuracy "
          f"{ffx.pm([r['yardstick_test_accuracy'] for r in runs])}.\n\n"
          + table(ffx.TABLE_HEAD, ffx.table_rows(record)) + "\n\n"
          + claims_table(ffx.claims(record)) + "\n")


@register("fastflow")
def fastflow_docs() -> dict[str, str]:
  return quick_and_full("fastflow", _fastflow_report)


def _distill_kac_report(record: dict) -> str:
  from experiments import distill_kac as dkx  # noqa: PLC0415 (claims and table)

  c = record["config"]
  runs = record["runs"]
  tm = record["timing"]
  return ("\n" + f"Velocity MLP hidden {tuple(c['hidden'])}, {thousands(c['train_steps'])} "
          f"teacher steps, {thousands(c['distill_steps'])} distillation steps per stage "
          f"(stages {' -> '.join(str(m) for m in c['stages'])}), CFG weight {c['guidance']:g}; "
          f"{c['samples']} samples per sampler from the same Kac noise; "
          f"{c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds. Teacher loss "
          f"{dkx.pm([r['final_loss'] for r in runs])}; FD between two halves of the real "
          f"held-out digits {dkx.pm([r['fd_real_halves'] for r in runs], '.2f')}; yardstick "
          f"test accuracy {dkx.pm([r['yardstick_test_accuracy'] for r in runs])}. Kac draws "
          f"of one training batch ({c['batch']} x 64 coordinates, 40 flips each) take "
          f"{g(1e3 * tm['kac_simulation'])} ms against {g(1e3 * tm['train_step'])} ms for a "
          f"whole training step ({100 * tm['kac_simulation'] / tm['train_step']:.0f}%).\n\n"
          + table(dkx.TABLE_HEAD, dkx.table_rows(record)) + "\n\n"
          + claims_table(dkx.claims(record)) + "\n")


@register("distill_kac")
def distill_kac_docs() -> dict[str, str]:
  return quick_and_full("distill_kac", _distill_kac_report)


def _redacbench_report(record: dict) -> str:
  from experiments import redacbench  # noqa: PLC0415 (the experiment's claims and table)

  c, runs = record["config"], record["runs"]
  exact = [r["exact_match_once"] for r in runs]
  people = (f"{c['min_people']}" if c["min_people"] == c["max_people"]
            else f"{c['min_people']}-{c['max_people']}")
  ex = runs[0]["example"]
  example = "\n".join(f"* {name}: `{ex[name] or '(empty)'}`"
                      for name in ["text", *redacbench.arm_names(c["passes"])])
  return ("\n" + f"{people} people per text, {thousands(c['train'])} training texts, "
          f"rewriter {c['layers']} layers d = {c['d_model']} ({thousands(c['steps'])} steps), "
          f"{thousands(c['test'])} held-out texts, {c['seeds']} seeds, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds:\n\n"
          + table(redacbench.TABLE_HEAD, redacbench.table_rows(record)) + "\n\n"
          + f"The rewriter's single pass equals its target (the oracle step) on {pm(exact)} "
          "of the held-out texts. One held-out text (seed 0) and what each redactor left:\n\n"
          + example + "\n\n" + claims_table(redacbench.claims(record)) + "\n")


@register("redacbench")
def redacbench_docs() -> dict[str, str]:
  return quick_and_full("redacbench", _redacbench_report)


def _virf_report(record: dict) -> str:
  from experiments import virf  # noqa: PLC0415 (the experiment's claims and table)

  runs, c = record["runs"], record["config"]
  unsafe = np.array([r["train_unsafe_share"] for r in runs])
  flagged = np.array([r["train_flagged_share"] for r in runs])
  status = {s: np.array([r["first_status"][s] for r in runs])
            for s in ("SAFE", "WARNING", "UNSAFE", "UNKNOWN")}
  return ("\n" + f"Planner {c['num_layers']} layers d = {c['d_model']} "
          f"({thousands(c['steps'])} steps), {thousands(c['train_plans'])} plan rows and "
          f"{thousands(c['repair_rows'])} unsafe plans in the repair set, "
          f"{thousands(c['tasks'])} held-out tasks, at most {c['max_attempts']} plans per "
          f"task, " + (f"{c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std "
                       "over seeds:" if c["seeds"] > 1 else
                       f"1 seed, {seconds(record['wall_time_s'])}:") + "\n\n"
          + table(virf.TABLE_HEAD, virf.table_rows(record)) + "\n\n"
          + f"Training plans unsafe (all 12 rules): {pm(unsafe)}; flagged by the tutor (its "
          f"10 rules): {pm(flagged)}. The planner's first plans, as the tutor rates them: "
          + ", ".join(f"{k} {pm(v)}" for k, v in status.items()) + ".\n\n"
          + claims_table(virf.claims(record)) + "\n")


@register("virf")
def virf_docs() -> dict[str, str]:
  return quick_and_full("virf", _virf_report)


def _lumos_report(record: dict) -> str:
  from experiments import lumos as lx  # noqa: PLC0415 (claims and table)

  c = record["config"]
  return ("\n" + f"Transformer d_model {c['d_model']} (one head), {c['layers']} layers, RoPE base "
          f"{g(c['rope_base'])}; {thousands(c['steps'])} Adam steps per arm, batch {c['batch']}, "
          f"{thousands(c['train_videos'])} training videos; {c['test_videos']} held-out videos, "
          f"{c['maskgit_steps']} MaskGIT rounds per frame; {c['seeds']} "
          f"seed{'s' if c['seeds'] > 1 else ''}, {seconds(record['wall_time_s'])}; mean ± std "
          "over seeds.\n\n"
          + table(lx.TABLE_HEAD, lx.table_rows(record)) + "\n\n"
          + claims_table(lx.claims(record)) + "\n")


@register("lumos")
def lumos_docs() -> dict[str, str]:
  return quick_and_full("lumos", _lumos_report)


def _ata_report(record: dict) -> str:
  from experiments import ata  # noqa: PLC0415 (the experiment's claims and tables)

  runs, c = record["runs"], record["config"]
  m2 = [r["in_dist_m2"] for r in runs]
  return ("\n" + f"Model {c['num_layers']} layers x {c['num_heads']} heads, d = {c['d_model']} "
          f"({thousands(c['steps'])} steps on {thousands(c['train_rows'])} rows with m in "
          f"{{1, 2}}), {c['heads']} steered heads, {thousands(c['tests'])} test prompts per m, "
          + (f"{c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds:"
             if c["seeds"] > 1 else f"1 seed, {seconds(record['wall_time_s'])}:") + "\n\n"
          + table(ata.TABLE_HEAD, ata.table_rows(record)) + "\n\n"
          + f"In distribution (m = 2, direct) exact match: {pm(m2)}.\n\n"
          + "ATA's exact match over alpha and over the number of steered heads k:\n\n"
          + table(["m", "alpha", "exact match"], ata.sweep_rows(record, "alpha_sweep"))
          + "\n\n"
          + table(["m", "k", "exact match"], ata.sweep_rows(record, "head_sweep")) + "\n\n"
          + claims_table(ata.claims(record)) + "\n")


@register("ata")
def ata_docs() -> dict[str, str]:
  return quick_and_full("ata", _ata_report)
def _ttom_report(record: dict) -> str:
  from experiments import ttom as tx  # noqa: PLC0415 (claims and table)

  c = record["config"]
  runs = record["runs"]
  strat = np.sum([r["arms"]["memory"]["strategies"] for r in runs], axis=0)
  probe = np.array([r["probe"]["iou_opt_steps"] for r in runs])  # (S, L)
  mid = np.array([r["probe"]["iou"][-1] for r in runs])  # (S, L) at t = T/2
  return ("\n" + f"DiT width {c['d_model']}, {c['heads']} heads, {c['layers']} layers, "
          f"{thousands(c['train_steps'])} training steps ({c['sample_steps']} DDPM steps, cosine "
          f"betas capped at {c['max_beta']:g}); LoRA rank {c['rank']}, alpha {c['alpha']:g}, "
          f"AdamW lr {c['lr']:g}, up to {c['iters']} iterations at each of the first "
          f"{c['opt_steps']} steps, threshold {c['threshold']:g}; latent-guidance step "
          f"{c['guidance_step']:g}; {c['prompts']} prompts from {c['types']} layout types "
          f"(jitter {c['jitter']} patch steps), {c['per_prompt']} samples each; memory of "
          f"{c['capacity']} entries, load only at similarity >= {c['load_sim']:g}, load + "
          f"update at >= {c['update_sim']:g}; {c['seeds']} seed{'s' if c['seeds'] > 1 else ''}, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds. DiT loss "
          f"{tx.pm([r['final_loss'] for r in runs])}; yardstick test accuracy "
          f"{tx.pm([r['yardstick_test_accuracy'] for r in runs])}. Probe (attention-box IoU "
          f"on noised real scenes; random pixels {tx.CHANCE_IOU:.3f}): per layer "
          + ", ".join(f"{tx.pm(probe[:, i])}" for i in range(probe.shape[1]))
          + " at the optimised steps' timesteps, "
          + ", ".join(f"{tx.pm(mid[:, i])}" for i in range(mid.shape[1]))
          + f" at t = {runs[0]['probe']['timesteps'][-1]}; LoRA layer(s) "
          f"{[r['layer'] for r in runs]}. Memory strategies over all prompts: optimise "
          f"{strat[0]}, load only {strat[1]}, load + update {strat[2]}.\n\n"
          + table(tx.TABLE_HEAD, tx.table_rows(record)) + "\n\n"
          + claims_table(tx.claims(record)) + "\n")


@register("ttom")
def ttom_docs() -> dict[str, str]:
  return quick_and_full("ttom", _ttom_report)


def _tru_report(record: dict) -> str:
  from experiments import tru  # noqa: PLC0415 (the experiment's claims and table)

  runs, c = record["runs"], record["config"]
  pre = np.array([r["pretrain_loss"] for r in runs])
  ex = runs[0]["arms"]
  mid = f"tru_a{tru._middle_alpha(c):g}"
  examples = "\n".join(f"* {arm}: D_u in B `{ex[arm]['forget_B']['examples'][0] or '(empty)'}`, "
                       f"held-out `{ex[arm]['heldout_A']['examples'][0] or '(empty)'}`, retain "
                       f"`{ex[arm]['retain_A']['examples'][0] or '(empty)'}`"
                       for arm in ("base", "ga", "graddiff", "npo", "idk", mid, "tru_no_ga",
                                   "tru_no_ascent"))
  return ("\n" + f"{c['entities']} entities in {c['domains']} domains, {c['relations']} "
          f"relations, {c['values']} values; model {c['num_layers']} layers d = {c['d_model']} "
          f"({thousands(c['pretrain_steps'])} pretraining steps, final loss {pm(pre)}), "
          f"{c['unlearn_steps']} unlearning steps per arm, "
          + (f"{c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds:"
             if c["seeds"] > 1 else f"1 seed, {seconds(record['wall_time_s'])}:") + "\n\n"
          + table(tru.TABLE_HEAD, tru.table_rows(record)) + "\n\n"
          + "Greedy outputs of seed 0 (first question of each set):\n\n" + examples + "\n\n"
          + claims_table(tru.claims(record)) + "\n")


@register("tru")
def tru_docs() -> dict[str, str]:
  return quick_and_full("tru", _tru_report)


def _asguard_report(record: dict) -> str:
  from experiments import asguard  # noqa: PLC0415 (the experiment's claims and table)

  runs, c = record["runs"], record["config"]
  pre = np.array([r["pretrain_loss"] for r in runs])
  a = runs[0]["attribution"]
  ex = runs[0]["arms"]
  examples = "\n".join(f"* {arm}: `{ex[arm]['past_harm']['examples'][0]}`, "
                       f"`{ex[arm]['past_neighbour']['examples'][0]}`"
                       for arm in ("aligned", "narrow_sft", "mixed_sft", "asguard",
                                   "asguard_random"))
  heads = ", ".join(f"L{h[0]}H{h[1]}" for h in a["vulnerable"])
  return ("\n" + f"{c['harmful']} harmful and {c['benign']} benign objects; model "
          f"{c['num_layers']} layers x {c['num_heads']} heads, d = {c['d_model']} "
          f"({thousands(c['pretrain_steps'])} pretraining steps, final loss {pm(pre)}, "
          f"{c['align_steps']} alignment steps), k = {c['k']} vulnerable heads, "
          f"{c['scale_steps']} scale steps, {c['pft_steps']} fine-tuning steps per arm, "
          + (f"{c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds:"
             if c["seeds"] > 1 else f"1 seed, {seconds(record['wall_time_s'])}:") + "\n\n"
          + table(asguard.TABLE_HEAD, asguard.table_rows(record)) + "\n\n"
          + f"Seed 0: vulnerable heads {heads} ({a['num_flip']} flip and {a['num_always']} "
          f"always-refused training requests); Spearman correlation of head IG with "
          f"activation patching {f(a['spearman_ig_patching'])}.\n\n"
          + "Greedy outputs of seed 0 (held-out past-tense harmful, past-tense near-neighbour):"
          + "\n\n" + examples + "\n\n" + claims_table(asguard.claims(record)) + "\n")


@register("asguard")
def asguard_docs() -> dict[str, str]:
  return quick_and_full("asguard", _asguard_report)


def _dl4nd_report(record: dict) -> str:
  from experiments import dl4nd  # noqa: PLC0415 (the experiment's claims and tables)

  c = record["config"]
  return ("\n" + f"{c['seeds']} seed(s) x held-out domains {list(c['held_out'])}, rotation "
          f"sets {', '.join(c['angle_sets'])}; {thousands(c['warmup_steps'])} warm-up + "
          f"{thousands(c['steps'])} Adam steps (batch {c['batch']}), noise {c['noise']:g}; "
          f"{seconds(record['wall_time_s'])}. Per seed the mean over the held-out domains, "
          "then mean ± std over seeds:\n\n"
          + table(dl4nd.TABLE_HEAD, dl4nd.table_rows(record)) + "\n\n"
          + "The GMM split and the diagnostics:\n\n"
          + table(dl4nd.SPLIT_HEAD, dl4nd.split_rows(record)) + "\n\n"
          + claims_table(dl4nd.claims(record)) + "\n")


@register("dl4nd")
def dl4nd_docs() -> dict[str, str]:
  return quick_and_full("dl4nd", _dl4nd_report)


def _egoworld_report(record: dict) -> str:
  from experiments import egoworld  # noqa: PLC0415 (the experiment's claims and table)

  runs, c = record["runs"], record["config"]
  hand = np.array([np.mean(r["hand_pixels_exo"]) for r in runs])
  ms = np.array([r["ms_per_reprojection"] for r in runs])
  return ("\n" + f"{c['seeds']} seeds x {c['scenes']} scenes, {c['size']} x {c['size']} "
          f"images, {21 * c['hands']} hand keypoints, exocentric / egocentric focal length "
          f"{c['exo_focal']:g} / {c['ego_focal']:g} x the image side, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds of the per-seed means over "
          "scenes (each noise level on the same standard draws). The oracle map (true depth "
          f"and pose) covers {pm([r['oracle_coverage'] for r in runs], lambda x: f(x, 3))} of "
          f"the egocentric image at {pm([r['oracle_psnr'] for r in runs])} dB on its covered "
          f"pixels; the hands cover {pm(hand, lambda x: f(x, 0))} exocentric pixels per scene "
          "(the median's sample):\n\n"
          + table(egoworld.TABLE_HEAD, egoworld.table_rows(record)) + "\n\n"
          + f"One reprojection (depth scale, Umeyama, back-projection and z-buffered splat of "
          f"{thousands(c['size'] ** 2)} points, vmapped over the grid) costs "
          f"{pm(ms, lambda x: f(x, 2))} ms on the run's CPU.\n\n"
          + claims_table(egoworld.claims(record)) + "\n")


@register("egoworld")
def egoworld_docs() -> dict[str, str]:
  return quick_and_full("egoworld", _egoworld_report)


def _tvi_report(record: dict) -> str:
  from experiments import tvi  # noqa: PLC0415 (the experiment's claims and table)

  c, runs = record["config"], record["runs"]
  vt = np.array([r["profile_vt"] for r in runs])
  t = np.array([r["profile_t"] for r in runs])
  profile = table(["layer l", "D_l(VT)", "D_l(T)", "gap"],
                  [[str(layer), pm(vt[:, layer], g), pm(t[:, layer], g),
                    pm(vt[:, layer] - t[:, layer], g)] for layer in range(vt.shape[1])])
  vips = ", ".join(("none" if r["vip"] > r["num_layers"] else str(r["vip"]))
                   + f" (auto {r['vip_auto']}, tau = {g(r['tau_auto'])})" for r in runs)
  rho = lambda key: pm([r["base"][key] for r in runs], lambda x: f(x, 3))  # noqa: E731
  return ("\n" + f"{c['layers']} layers, d = {c['d']}, {(8 // c['patch']) ** 2} image tokens, "
          f"{thousands(c['train_rows'])} training questions ({c['hint_agree']:.0%} hint "
          f"agreement, {c['blind_share']:.0%} blind), {thousands(c['steps'])} steps, then "
          f"{thousands(c['finetune'])} fine-tuning steps per lambda; {c['seeds']} seeds, "
          f"{seconds(record['wall_time_s'])}. Mean ± std over seeds on held-out digits "
          f"({thousands(c['test'])} questions per set):\n\n"
          + table(tvi.TABLE_HEAD, tvi.table_rows(record)) + "\n\n"
          + f"Chain-of-embedding profile of the stage-1 model on {thousands(c['probe'])} probe "
          f"questions (share in D_VT: {pm([r['vt_share'] for r in runs])}):\n\n" + profile
          + "\n\n" + f"VIP per seed (tau = {c['tau']}): {vips}. Spearman rho of conflict-set "
          f"correctness with TVI (layers from the VIP): {rho('rho_after')} (p per seed: "
          + ", ".join(g(r["base"]["p_after"], 2) for r in runs) + "); with the mean distance "
          f"before the VIP: {rho('rho_before')} (p per seed: "
          + ", ".join(g(r["base"]["p_before"], 2) for r in runs) + ").\n\n"
          + claims_table(tvi.claims(record)) + "\n")


@register("tvi")
def tvi_docs() -> dict[str, str]:
  noisy = recorded("tvi", "full_noisy")
  return {**quick_and_full("tvi", _tvi_report),
          "full_noisy": ("The noisy-image full run (`python -m experiments.tvi --noise 0.5 --out "
                         "docs/results/tvi/full_noisy`) is not recorded yet." if noisy is None
                         else "\nNoisy-image full run (`docs/results/tvi/full_noisy/`, pixel "
                         f"noise std {noisy['config']['noise']}): "
                         + _tvi_report(noisy).lstrip("\n"))}


def _care_report(record: dict) -> str:
  from experiments import care  # noqa: PLC0415 (the experiment's claims and tables)

  runs, c = record["runs"], record["config"]
  ys_acc = np.array([r["yardstick_test_accuracy"] for r in runs])
  q = np.array([r["pipeline"]["confidence_quartiles"] for r in runs])
  corr = np.array([r["pipeline"]["confidence_noise_corr"] for r in runs])
  digit = {v: np.array([r["pipeline"]["digit_acc"][v] for r in runs]) for v in ("crop", "masked")}
  spread = f"mean ± std over {c['seeds']} seeds" if c["seeds"] > 1 else "one seed"
  return ("\n" + f"{thousands(c['train'])} training and {thousands(c['test'])} test questions, "
          f"noise std up to {c['noise']}, segmenter and end-to-end MLPs of width "
          f"{c['seg_width']} / {c['qa_width']} ({thousands(c['steps'])} steps each); REINFORCE "
          f"with {c['slots']} slots, groups of {c['group']}, {thousands(c['rl_steps'])} steps "
          f"per arm; {seconds(record['wall_time_s'])}; {spread}.\n\n"
          + "Accuracy of the pipeline against the confidence threshold (above 1 every mask is "
          "dropped: the end-to-end network alone):\n\n"
          + table(care.TAU_HEAD, care.tau_rows(record)) + "\n\n"
          + "Each view's answer accuracy:\n\n"
          + table(care.VIEW_HEAD, care.view_rows(record)) + "\n\n"
          + f"Mask confidence quartiles (min, 25%, median, 75%, max): "
          f"{', '.join(f(x) for x in q.mean(0))}; correlation with the scene's noise "
          f"{pm(corr)}. Digit accuracy of the Yardstick on the crop view {pm(digit['crop'])}, on "
          f"the masked view {pm(digit['masked'])} (on clean held-out digits {pm(ys_acc)}).\n\n"
          + "REINFORCE set prediction (argmax decoding on held-out canvases):\n\n"
          + table(care.RL_HEAD, care.rl_rows(record)) + "\n\n"
          + claims_table(care.claims(record)) + "\n")


@register("care")
def care_docs() -> dict[str, str]:
  return quick_and_full("care", _care_report)




def _greedy_report(record: dict) -> str:
  from experiments import greedy  # noqa: PLC0415 (the experiment's claims and table)

  c, runs = record["config"], record["runs"]
  bc = np.array([r["bc_loss"] for r in runs])
  behaviour = np.array([r["behaviour"]["regret"] for r in runs])
  cover = np.array([r["behaviour"]["coverage"] for r in runs])
  spread = (f"{c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over seeds"
            if c["seeds"] > 1 else f"1 seed, {seconds(record['wall_time_s'])}")
  return ("\n" + f"{c['num_arms']}-armed {c['kind']} bandit, {c['horizon']} steps, UCB "
          f"c = {c['ucb_c']}; policy {c['layers']} layers d = {c['d_model']}, behaviour "
          f"cloning on {thousands(c['bc_episodes'])} episodes, epsilon-greedy / UCB / copy in "
          f"shares {c['greedy_share']:g} / {c['ucb_share']:g} / "
          f"{1 - c['greedy_share'] - c['ucb_share']:g} (behaviour regret "
          f"{pm(behaviour)}, coverage {pm(cover)}) for {thousands(c['bc_steps'])} steps "
          f"(final loss {pm(bc)}), RLFT {c['rl_iters']} iterations of {c['rl_episodes']} "
          f"episodes (lr {c['rl_lr']:g}, KL coefficient {c['kl_coef']:g}); "
          f"{c['eval_episodes']} evaluation episodes; {spread}. The frequency share and "
          f"entropy are read after {c['max_repeats']} repeats of one arm:\n\n"
          + table(greedy.TABLE_HEAD, greedy.table_rows(record)) + "\n\n"
          + claims_table(greedy.claims(record)) + "\n")


@register("greedy")
def greedy_docs() -> dict[str, str]:
  return quick_and_full("greedy", _greedy_report)



# ---------------------------------------------------------------------------
# VPRL (docs/methods/vprl.md)


def _vprl_report(record: dict) -> str:
  from experiments import vprl  # noqa: PLC0415 (the experiment's claims and table)

  c, runs = record["config"], record["runs"]
  opt_len = np.array([r["test_optimal_length"] for r in runs])
  overlap = sum(r["test_overlap"] for r in runs)
  loss = {a: np.array([r["sft_final_loss"][a] for r in runs]) for a in ("stage1", "vpft")}
  return ("\n" + f"{c['train_maps']} training and {c['test_maps']} held-out maps, "
          f"transformer {c['layers']} layers d = {c['d_model']}, {thousands(c['sft_steps'])} SFT "
          f"steps per arm, {c['grpo_iters']} GRPO iterations of {c['prompts']} states x G = "
          f"{c['group']}, {c['seeds']} seeds, {seconds(record['wall_time_s'])}; mean ± std over "
          f"seeds on the held-out maps (optimal plan length {pm(opt_len)}; "
          f"{overlap} held-out maps equal to a training map):\n\n"
          + table(vprl.TABLE_HEAD, vprl.table_rows(record)) + "\n\n"
          + "Final SFT loss per next-image token: stage 1 "
          f"{pm(loss['stage1'], lambda x: f(x, 3))}, VPFT {pm(loss['vpft'], lambda x: f(x, 3))}"
          ".\n\n"
          + claims_table(vprl.claims(record)) + "\n")


@register("vprl")
def vprl_docs() -> dict[str, str]:
  return quick_and_full("vprl", _vprl_report)


CONFIGS = {"full": dict(check=False)}


def _satdreamer_report(record: dict) -> str:
  from experiments import satdreamer  # noqa: PLC0415 (the experiment's claims and tables)

  c = record["config"]
  return ("\n" + f"{c['size']} x {c['size']} cities, {c['height']} x {c['width']} panoramas, "
          f"{thousands(c['train_cities'])} training cities x {c['views']} views, "
          f"{thousands(c['steps'])} steps per arm (width {c['dim']}); correspondence: "
          f"{thousands(c['corr_train'])} training trajectories, "
          f"{thousands(c['corr_steps'])} steps per arm; {c['seeds']} seeds, "
          f"{seconds(record['wall_time_s'])}; mean ± std over seeds on held-out cities:\n\n"
          + table(satdreamer.TABLE_HEAD, satdreamer.table_rows(record)) + "\n\n"
          + table(satdreamer.CORR_HEAD, satdreamer.corr_rows(record)) + "\n\n"
          + claims_table(satdreamer.claims(record)) + "\n")


@register("satdreamer")
def satdreamer_docs() -> dict[str, str]:
  return quick_and_full("satdreamer", _satdreamer_report)


def cli() -> ExperimentCLI:
  """The command line (the same mechanism as the experiments'): ``--check``."""
  return ExperimentCLI(__doc__, CONFIGS,
                       helps={"check": "write nothing; exit 1 listing the regions that differ"})


def main(argv: list[str] | None = None) -> int:
  _, _, cfg = cli().parse(argv)
  if cfg["check"]:
    diff = stale()
    for path, regions in diff.items():
      for key, old, new in regions:
        print(f"{path}: gen:{key}\n  committed: {old[:200]!r}\n  generated: {new[:200]!r}")
    print("generated docs are up to date" if not diff
          else f"{sum(map(len, diff.values()))} generated regions differ; run "
               "`python -m experiments.docs`")
    return 1 if diff else 0
  for path in doc_files():
    with open(path) as fh:
      text, changed = render(fh.read())
    if changed:
      with open(path, "w") as fh:
        fh.write(text)
      print(f"{os.path.relpath(path, ROOT)}: {len(changed)} regions updated")
  return 0


if __name__ == "__main__":
  sys.exit(main())
