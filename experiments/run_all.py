"""Reproduce everything: every experiment and benchmark, then one ``REPORT.md``.

    python -m experiments.run_all [--quick] [--out DIR] [--only NAME ...] [--timeout S]
                                  [--report-only] [--update] [--docs RECORD]

Each experiment (and its benchmark) runs as ``python -m experiments.<module>`` in
its own process, so one that fails, runs out of memory or times out is recorded
in the report and the others still run. Its output goes to ``DIR/<module>/``
(``results.json``, ``summary.md``, figures, ``log.txt``). Afterwards each
method's verdicts are read from its ``results.json`` through the protocol
(:func:`experiments.protocol.method_decisions`: the experiment's ``claims(result)``
where the registry, :mod:`experiments.methods`, marks it ported; "cannot tell: test
bed under repair" otherwise), and each benchmark module's ``ratios(result)`` gives ours-vs-anchor
ratios from the same run. ``DIR/REPORT.md`` collects them with the figures, the
machine and the library versions; ``DIR/report.json`` holds the same data.
Re-running into the same ``DIR`` reruns everything except matching's finished
instances, which that experiment resumes from ``DIR/matching_incremental/runs/``
(use a new ``DIR`` to re-measure their times). ``DIR`` defaults to
``results/run_all`` (not tracked by git). ``--only NAME ... --update`` re-runs those
experiments and splices their entries into ``DIR/report.json`` (a method added since the
whole run, or one re-measured), keeping the others; the report says so and its total
becomes the sum of the entries' wall times.

The committed record keeps one copy of each figure: per method under
``docs/results/<method>/<scale>/``, and the run_all report under
``docs/results/run_all/<scale>/`` links to those (``--docs docs/results``: a
figure identical to the record's, or removed from ``DIR``, is linked there).
``python -m experiments.run_all --report-only --out docs/results/run_all/quick
--docs docs/results`` rebuilds the committed report that way.

Scales: ``--quick`` runs each experiment's ``--quick`` setting (see
``docs/results/run_all/quick/REPORT.md`` for its wall time on 2 CPU cores);
without it, the full runs the tables of ``docs/methods/`` come from (hours on CPU).
``--smoke`` (tests only) runs each at its smallest setting. On a host with
several devices the experiments that vmap over seeds split them over the devices
(``jaxlab.training.shard_seeds``; use a multiple of the device count).
"""

from __future__ import annotations

import datetime
import filecmp
import glob
import importlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
import traceback

from tqdm.auto import tqdm

from experiments import protocol
from experiments.cli import ExperimentCLI
from experiments.methods import METHODS, SCALE_FLAGS, Method

ENTRIES: tuple[Method, ...] = METHODS  # what run_all runs, in this order (the registry)


def run_module(module: str, argv: list[str], out_dir: str, timeout: float | None) -> dict:
  """Runs ``python -m experiments.<module> *argv --out out_dir/module``; never raises."""
  out = os.path.join(out_dir, module)
  os.makedirs(out, exist_ok=True)
  cmd = [sys.executable, "-m", f"experiments.{module}", *argv, "--out", out]
  start = time.time()
  log_path = os.path.join(out, "log.txt")
  with open(log_path, "w") as log:
    try:  # no progress bars in the logs (run_all shows its own): clean error tails
      proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                            check=False, env={**os.environ, "TQDM_DISABLE": "1"})
      status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
      status = f"timed out after {timeout:.0f} s"
  run = {"module": module, "command": shlex.join(cmd[2:]), "status": status,
         "wall_time_s": round(time.time() - start, 1), "log": os.path.relpath(log_path, out_dir)}
  if status != "ok":
    with open(log_path) as f:
      run["error_tail"] = f.read()[-3000:]
  return run


def _load(out: str) -> dict | None:
  path = os.path.join(out, "results.json")
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


def _rows(module: str, fn: str, result: dict | None) -> tuple[list[dict], str | None]:
  """``module.<fn>(result)`` as plain dicts, or the error it raised."""
  if result is None:
    return [], "no results.json"
  try:
    rows = getattr(importlib.import_module(f"experiments.{module}"), fn)(result)
    return [r._asdict() for r in rows], None
  except Exception:  # noqa: BLE001 (a broken report function must not hide the others)
    return [], traceback.format_exc(limit=3)


def _decisions(method: Method, result: dict | None) -> tuple[list[dict], str | None]:
  """The method's verdicts under the protocol (:func:`protocol.method_decisions`) as plain
  dicts, or the error raised while reading them."""
  if result is None:
    return [], "no results.json"
  try:
    return [{**d._asdict(), "text": d.text}
            for d in protocol.method_decisions(method, result)], None
  except Exception:  # noqa: BLE001 (a broken claims() must not hide the others)
    return [], traceback.format_exc(limit=3)


def _method(module: str) -> Method:
  for e in ENTRIES:
    if e.module == module:
      return e
  raise KeyError(f"{module!r} is not in the registry (experiments/methods.py)")


def _figures(result: dict | None, out: str, out_dir: str,
             committed: str | None = None) -> list[str]:
  """The figures this run wrote (its ``figures`` list; PNGs in ``out`` if it has none).

  With ``committed`` (the method's folder in the committed record, e.g.
  ``docs/results/dipper/quick``), a figure links to the record's copy when that
  copy is byte-identical to the run's, or when the run's own copy was removed as
  a duplicate. Paths are relative to ``out_dir``, where ``REPORT.md`` is written.
  """
  names = [os.path.basename(f) for f in (result or {}).get("figures", [])]
  if not names:
    names = [os.path.basename(p) for p in sorted(glob.glob(os.path.join(out, "*.png")))]
  paths = []
  for name in names:
    local = os.path.join(out, name)
    record = os.path.join(committed, name) if committed is not None else None
    if record is not None and os.path.exists(record) and (
        not os.path.exists(local) or filecmp.cmp(local, record, shallow=False)):
      paths.append(record)
      continue
    if os.path.exists(local):
      paths.append(local)
  return [os.path.relpath(p, out_dir) for p in paths]


def _committed(docs: str | None, module: str, scale: str) -> str | None:
  """The method's folder in the committed record (``docs/<module>/<scale>``), if any."""
  return None if docs is None else os.path.join(docs, module, scale)


def run_entry(entry: Method, scale: str, out_dir: str, timeout: float | None,
              docs: str | None = None) -> dict:
  """Runs one method's experiment and benchmark and reads their report rows."""
  out = os.path.join(out_dir, entry.module)
  rec = {"name": entry.name, "paper": entry.paper,
         "experiment": run_module(entry.module, SCALE_FLAGS[scale], out_dir, timeout)}
  result = _load(out) if rec["experiment"]["status"] == "ok" else None
  rec["claims"], rec["claims_error"] = _decisions(entry, result)
  rec["figures"] = (_figures(result, out, out_dir, _committed(docs, entry.module, scale))
                    if result is not None else [])
  if entry.bench:
    bench_out = os.path.join(out_dir, entry.bench)
    rec["bench"] = run_module(entry.bench, entry.bench_args[scale], out_dir, timeout)
    bench_result = _load(bench_out) if rec["bench"]["status"] == "ok" else None
    rec["ratios"], rec["ratios_error"] = _rows(entry.bench, "ratios", bench_result)
  return rec


def reread(record: dict, out_dir: str, docs: str | None = None, scale: str = "quick") -> dict:
  """``record`` with its claims, ratios and figures read again from the saved results
  (figures linked to the committed record under ``docs`` where identical, see
  :func:`_figures`)."""
  module = record["experiment"]["module"]
  out = os.path.join(out_dir, module)
  result = _load(out) if record["experiment"]["status"] == "ok" else None
  try:
    record["claims"], record["claims_error"] = _decisions(_method(module), result)
  except KeyError as e:  # an entry of a method since removed from the registry
    record["claims"], record["claims_error"] = [], str(e)
  record["figures"] = (_figures(result, out, out_dir, _committed(docs, module, scale))
                       if result is not None else [])
  if "bench" in record:
    bench = record["bench"]["module"]
    result = _load(os.path.join(out_dir, bench)) if record["bench"]["status"] == "ok" else None
    record["ratios"], record["ratios_error"] = _rows(bench, "ratios", result)
  return record


def machine_info() -> dict:
  """Machine and versions, read in a child process so this one never initializes JAX."""
  code = ("import json, jax, flax, optax; d = jax.devices(); print(json.dumps({"
          "'backend': jax.default_backend(), 'devices': f'{len(d)} x {d[0].device_kind}', "
          "'jax': jax.__version__, 'flax': flax.__version__, 'optax': optax.__version__}))")
  try:
    info = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                     text=True, check=True, timeout=300).stdout)
  except Exception as e:  # noqa: BLE001
    info = {"error": repr(e)}
  info.update(python=platform.python_version(), platform=platform.platform(),
              cpus=os.cpu_count())
  return info


def _cell(text: object) -> str:
  """Text safe inside a markdown table cell."""
  return str(text).replace("|", "\\|").replace("\n", " ")


def _primary(record: dict) -> str:
  """The primary claim's verdict (the first row), for the summary table."""
  if record["claims_error"] and record["experiment"]["status"] == "ok":
    return "claims error"
  return record["claims"][0]["verdict"] if record["claims"] else "-"


def _counts(record: dict) -> str:
  """``held / refuted / inconclusive / cannot tell`` counts over every claim."""
  if not record["claims"]:
    return "-"
  return " / ".join(str(sum(c["verdict"] == v for c in record["claims"]))
                    for v in protocol.VERDICTS)


def _bench_summary(record: dict) -> str:
  bench = record.get("bench")
  if bench is None:
    return "-"
  if bench["status"] != "ok":
    return bench["status"]
  if record["ratios_error"]:
    return "ratios error"
  return f"{len(record['ratios'])} ratios" if record["ratios"] else "ok"


def format_report(report: dict) -> str:
  """The markdown of ``REPORT.md`` from ``report.json``'s dict."""
  m = report["machine"]
  lines = [f"# jaxlab reproduction report ({report['scale']})", "",
           f"Generated {report['date']} by `python -m experiments.run_all "
           f"{' '.join(report['argv'])}` in {report['wall_time_s']:.0f} s"
           + (" (the sum of the entries' wall times)" if report.get("updates") else "") + ".",
           "",
           *[f"Updated {u['date']} by `python -m experiments.run_all {' '.join(u['argv'])}`: "
             f"{', '.join(u['modules'])} re-run." for u in report.get("updates", [])],
           *([""] if report.get("updates") else []),
           "Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()), "",
           "Verdicts follow the protocol (`experiments/protocol.py`); claims: held / refuted / "
           "inconclusive / cannot tell.", "",
           "| method | experiment | wall time | primary claim | claims | benchmark |",
           "|---|---|---|---|---|---|"]
  for r in report["entries"]:
    exp = r["experiment"]
    lines.append(f"| {r['name']} | {exp['status']} | {exp['wall_time_s']:.0f} s | "
                 f"{_primary(r)} | {_counts(r)} | {_cell(_bench_summary(r))} |")
  for r in report["entries"]:
    exp = r["experiment"]
    lines += ["", f"## {r['name']}", "", f"{r['paper']}. `python -m {exp['command']}` "
              f"({exp['status']}, {exp['wall_time_s']:.0f} s; log `{exp['log']}`).", ""]
    if exp["status"] != "ok":
      lines += ["```", exp.get("error_tail", "").strip()[-1500:], "```", ""]
    if r["claims"]:
      lines += ["| claim | measured | verdict |", "|---|---|---|"]
      lines += [f"| {_cell(c['claim'])}{' (primary)' if c['primary'] else ''} | "
                f"{_cell(c['measured'])} | {_cell(c['text'])} |" for c in r["claims"]]
      lines.append("")
    elif r["claims_error"] and exp["status"] == "ok":
      lines += ["Claims could not be read:", "```", r["claims_error"].strip(), "```", ""]
    lines += [f"![{os.path.basename(f)}]({f})" for f in r["figures"]]
    if "bench" in r:
      b = r["bench"]
      lines += ["", f"Benchmark: `python -m {b['command']}` ({b['status']}, "
                    f"{b['wall_time_s']:.0f} s).", ""]
      if r["ratios"]:
        lines += ["| comparison (ours vs anchor) | ratio | better | note |", "|---|---|---|---|"]
        lines += [f"| {_cell(x['name'])} | {x['ratio']:.3g} | "
                  f"{'higher' if x.get('higher_is_better') else 'lower'} | {_cell(x['note'])} |"
                  for x in r["ratios"]]
      elif b["status"] != "ok":
        lines += ["```", b.get("error_tail", "").strip()[-1500:], "```"]
      elif r["ratios_error"]:
        lines += ["Ratios could not be read:", "```", r["ratios_error"].strip(), "```"]
  return "\n".join(lines) + "\n"


def cli() -> ExperimentCLI:
  """The command line: the run's settings (the same at every scale: ``--quick`` and ``--smoke``
  select the experiments' scale) and ``--report-only``."""
  settings = dict(only=None, timeout=None)
  cli = ExperimentCLI(
      __doc__, {"full": settings, "quick": settings, "smoke": settings}, out="results/run_all",
      quick_help="each experiment's --quick setting",
      types={"only": list[str] | None, "timeout": float | None},
      choices={"only": [e.module for e in ENTRIES]},
      helps={"only": "run only these experiments (module names)",
             "timeout": "seconds allowed per experiment or benchmark (default: none)"})
  cli.parser.add_argument("--report-only", action="store_true",
                          help="run nothing: rebuild REPORT.md from DIR/report.json and the "
                               "results saved under DIR (after changing a claims() function)")
  cli.parser.add_argument("--update", action="store_true",
                          help="with --only: run those experiments and splice their entries into "
                               "DIR/report.json (same scale), keeping the other entries; the "
                               "total becomes the sum of the entries' wall times and the report "
                               "lists the update")
  cli.parser.add_argument("--docs", default=None, metavar="RECORD",
                          help="link each figure to RECORD/<module>/<scale>/ (e.g. docs/results) "
                               "where that copy is byte-identical to the run's or the run's copy "
                               "was removed, so a committed report keeps no duplicate figures")
  return cli


def main(argv: list[str] | None = None) -> dict:
  """Runs the selected experiments and writes ``REPORT.md`` and ``report.json``."""
  args, scale, cfg = cli().parse(argv)
  args.only, args.timeout = cfg["only"], cfg["timeout"]
  if args.report_only:
    with open(os.path.join(args.out, "report.json")) as f:
      report = json.load(f)
    report["entries"] = [reread(r, args.out, args.docs, report["scale"])
                         for r in report["entries"]]
    return _write_report(report, args.out)
  if args.timeout is not None and args.timeout <= 0:
    raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout}")
  if args.update and args.only is None:
    raise ValueError("--update needs --only: the experiments to re-run into DIR/report.json")
  entries = [e for e in ENTRIES if args.only is None or e.module in args.only]
  previous = None
  if args.update:
    with open(os.path.join(args.out, "report.json")) as f:
      previous = json.load(f)
    if previous["scale"] != scale:
      raise ValueError(f"--update: DIR/report.json is a {previous['scale']!r} report, this run "
                       f"is {scale!r}")
  os.makedirs(args.out, exist_ok=True)
  start = time.time()
  records = []
  bar = tqdm(entries, desc="run_all", unit="experiment")
  for entry in bar:
    bar.set_postfix_str(entry.module)
    records.append(run_entry(entry, scale, args.out, args.timeout, args.docs))
    bar.write(f"{entry.module}: {records[-1]['experiment']['status']} "
              f"({records[-1]['experiment']['wall_time_s']:.0f} s)")
  report = {"scale": scale, "argv": list(argv if argv is not None else sys.argv[1:]),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "wall_time_s": round(time.time() - start, 1), "machine": machine_info(),
            "entries": records}
  if previous is not None:
    report = splice(previous, report)
  return _write_report(report, args.out)


def _entry_seconds(r: dict) -> float:
  return r["experiment"]["wall_time_s"] + r.get("bench", {}).get("wall_time_s", 0.0)


def splice(previous: dict, update: dict) -> dict:
  """``previous`` report with ``update``'s entries in place of (or added to) its own, in
  :data:`ENTRIES` order. The total becomes the sum of the entries' wall times (a whole run
  adds only the moments between processes) and ``updates`` lists each splice (date,
  modules, machine); ``date``, ``argv`` and ``machine`` stay the whole run's."""
  by_module = {r["experiment"]["module"]: r for r in previous["entries"]}
  by_module.update({r["experiment"]["module"]: r for r in update["entries"]})
  order = [e.module for e in ENTRIES]
  entries = sorted(by_module.values(), key=lambda r: (
      order.index(r["experiment"]["module"]) if r["experiment"]["module"] in order
      else len(order)))
  updates = [*previous.get("updates", []),
             {"date": update["date"], "argv": update["argv"], "machine": update["machine"],
              "modules": [r["experiment"]["module"] for r in update["entries"]]}]
  return {**previous, "entries": entries, "updates": updates,
          "wall_time_s": round(sum(_entry_seconds(r) for r in entries), 1)}


def _write_report(report: dict, out_dir: str) -> dict:
  with open(os.path.join(out_dir, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
  text = format_report(report)
  with open(os.path.join(out_dir, "REPORT.md"), "w") as f:
    f.write(text)
  print(text.split("\n## ")[0])
  print(f"report: {os.path.join(out_dir, 'REPORT.md')}")
  return report


if __name__ == "__main__":
  main()
