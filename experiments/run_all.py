"""Reproduce everything: every experiment and benchmark, then one ``REPORT.md``.

    python -m experiments.run_all [--quick] [--out DIR] [--only NAME ...] [--timeout S]

Each experiment (and its benchmark) runs as ``python -m experiments.<module>`` in
its own process, so one that fails, runs out of memory or times out is recorded
in the report and the others still run. Its output goes to ``DIR/<module>/``
(``results.json``, ``summary.md``, figures, ``log.txt``). Afterwards each
experiment module's ``claims(result)`` turns its ``results.json`` into report
rows (the paper's claim, our measurement with its spread over seeds, whether it
held) and each benchmark module's ``ratios(result)`` gives ours-vs-anchor
ratios from the same run. ``DIR/REPORT.md`` collects them with the figures, the
machine and the library versions; ``DIR/report.json`` holds the same data.

Scales: ``--quick`` runs each experiment's ``--quick`` setting (about 45 minutes
in all on 2 CPU cores); without it, the full runs the README's tables come from
(hours on CPU; minutes to an hour on one accelerator). ``--smoke`` (tests only)
runs each at its smallest setting. On a host with several devices every
experiment shards its seeds over them (``experiments.common.shard_seeds``); for
several hosts call ``jax.distributed.initialize()`` in each process first (see
the README).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import importlib
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from typing import NamedTuple

from tqdm.auto import tqdm


class Entry(NamedTuple):
  """One method: its experiment module, its benchmark and their arguments per scale."""

  name: str  # the method, as the README's methods table names it
  module: str  # experiments.<module>
  paper: str
  bench: str | None = None  # experiments.<bench> (optional)
  bench_args: dict[str, list[str]] | None = None  # scale -> argv for the benchmark


SCALE_FLAGS = {"smoke": ["--smoke"], "quick": ["--quick"], "full": []}

ENTRIES: list[Entry] = [
    Entry("Quantized Adam and Muon", "quant_optim",
          "Tang, Li, Zou, arXiv:2510.21314", "bench_quant_optim",
          {"smoke": ["--quick", "--configs", "storage int8"], "quick": ["--quick"], "full": []}),
    Entry("Incremental metric bipartite matching", "matching_incremental",
          "OpenReview wnIanx0r0w", "bench_matching",
          {"smoke": ["--n", "200"], "quick": ["--quick"], "full": []}),
    Entry("Flow Actor-Critic", "flow_actor_critic", "Chae et al., arXiv:2602.18015",
          "bench_flow_actor_critic",
          {"smoke": ["--seeds", "1", "--steps", "20", "--hidden", "16", "--batch-size", "16"],
           "quick": ["--steps", "300"], "full": []}),
    Entry("DIPPER", "dipper", "Singh et al., arXiv:2411.00361", "bench_envs",
          {"smoke": ["--envs", "64", "--steps", "50"], "quick": [], "full": []}),
    Entry("Fractal convergence of GD", "fractal_gd", "Liang & Montufar, arXiv:2509.25351",
          "bench_fractal_gd",
          {"smoke": ["--resolution", "32", "--max-steps", "200"], "quick": [], "full": []}),
    Entry("Training re-evaluation curves", "trec", "Bergsma et al., arXiv:2509.25380"),
    Entry("alpha-DPO for diffusion", "alpha_dpo", "OpenReview wqbnA6PcKr"),
    Entry("ReCouPLe", "recouple", "Hwang et al., arXiv:2603.04861"),
    Entry("Test-Time Matching", "ttm", "Zhu et al., arXiv:2510.07632"),
]


def run_module(module: str, argv: list[str], out_dir: str, timeout: float | None) -> dict:
  """Runs ``python -m experiments.<module> *argv --out out_dir/module``; never raises."""
  out = os.path.join(out_dir, module)
  os.makedirs(out, exist_ok=True)
  cmd = [sys.executable, "-m", f"experiments.{module}", *argv, "--out", out]
  start = time.time()
  log_path = os.path.join(out, "log.txt")
  with open(log_path, "w") as log:
    try:
      proc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                            check=False)
      status = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
      status = f"timed out after {timeout:.0f} s"
  run = {"module": module, "command": " ".join(cmd[2:]), "status": status,
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


def run_entry(entry: Entry, scale: str, out_dir: str, timeout: float | None) -> dict:
  out = os.path.join(out_dir, entry.module)
  rec = {"name": entry.name, "paper": entry.paper,
         "experiment": run_module(entry.module, SCALE_FLAGS[scale], out_dir, timeout)}
  result = _load(out) if rec["experiment"]["status"] == "ok" else None
  rec["claims"], rec["claims_error"] = _rows(entry.module, "claims", result)
  rec["figures"] = sorted(os.path.relpath(p, out_dir)
                          for p in glob.glob(os.path.join(out, "*.png")))
  if entry.bench:
    bench_out = os.path.join(out_dir, entry.bench)
    rec["bench"] = run_module(entry.bench, entry.bench_args[scale], out_dir, timeout)
    bench_result = _load(bench_out) if rec["bench"]["status"] == "ok" else None
    rec["ratios"], rec["ratios_error"] = _rows(entry.bench, "ratios", bench_result)
  return rec


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


def _held(value) -> str:
  return {True: "yes", False: "**no**", None: "n/a"}[value]


def _cell(text) -> str:
  return str(text).replace("|", "\\|").replace("\n", " ")


def format_report(report: dict) -> str:
  """The markdown of ``REPORT.md`` from ``report.json``'s dict."""
  m = report["machine"]
  lines = [f"# jaxlab reproduction report ({report['scale']})", "",
           f"Generated {report['date']} by `python -m experiments.run_all "
           f"{' '.join(report['argv'])}` in {report['wall_time_s']:.0f} s.", "",
           "Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()), "",
           "| method | experiment | wall time | claims held | benchmark |",
           "|---|---|---|---|---|"]
  for r in report["entries"]:
    exp = r["experiment"]
    held = [c["held"] for c in r["claims"]]
    verdict = (f"{sum(h is True for h in held)} / {sum(h is not None for h in held)}"
               if held else "-")
    bench = r.get("bench")
    bench_text = "-" if bench is None else (bench["status"] if bench["status"] != "ok" else
                                             ", ".join(f"{x['ratio']:.3g}x"
                                                       for x in r["ratios"]) or "ok")
    lines.append(f"| {r['name']} | {exp['status']} | {exp['wall_time_s']:.0f} s | {verdict} "
                 f"| {_cell(bench_text)} |")
  for r in report["entries"]:
    exp = r["experiment"]
    lines += ["", f"## {r['name']}", "", f"{r['paper']}. `python -m {exp['command']}` "
              f"({exp['status']}, {exp['wall_time_s']:.0f} s; log `{exp['log']}`).", ""]
    if exp["status"] != "ok":
      lines += ["```", exp.get("error_tail", "").strip()[-1500:], "```", ""]
    if r["claims"]:
      lines += ["| claim | measured | held |", "|---|---|---|"]
      lines += [f"| {_cell(c['claim'])} | {_cell(c['measured'])} | {_held(c['held'])} |"
                for c in r["claims"]]
      lines.append("")
    elif r["claims_error"] and exp["status"] == "ok":
      lines += ["Claims could not be read:", "```", r["claims_error"].strip(), "```", ""]
    lines += [f"![{os.path.basename(f)}]({f})" for f in r["figures"]]
    if "bench" in r:
      b = r["bench"]
      lines += ["", f"Benchmark: `python -m {b['command']}` ({b['status']}, "
                    f"{b['wall_time_s']:.0f} s).", ""]
      if r["ratios"]:
        lines += ["| comparison | ratio | note |", "|---|---|---|"]
        lines += [f"| {_cell(x['name'])} | {x['ratio']:.3g} | {_cell(x['note'])} |"
                  for x in r["ratios"]]
      elif b["status"] != "ok":
        lines += ["```", b.get("error_tail", "").strip()[-1500:], "```"]
      elif r["ratios_error"]:
        lines += ["Ratios could not be read:", "```", r["ratios_error"].strip(), "```"]
  return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help="each experiment's --quick setting (about 45 min on 2 CPU cores)")
  parser.add_argument("--smoke", action="store_true", help=argparse.SUPPRESS)  # tests only
  parser.add_argument("--out", default="results/run_all")
  parser.add_argument("--only", nargs="+", default=None, metavar="MODULE",
                      choices=[e.module for e in ENTRIES],
                      help="run only these experiments (module names)")
  parser.add_argument("--timeout", type=float, default=None,
                      help="seconds allowed per experiment or benchmark (default: none)")
  args = parser.parse_args(argv)
  if args.timeout is not None and args.timeout <= 0:
    raise ValueError(f"--timeout must be > 0 seconds, got {args.timeout}")
  scale = "smoke" if args.smoke else "quick" if args.quick else "full"
  entries = [e for e in ENTRIES if args.only is None or e.module in args.only]
  os.makedirs(args.out, exist_ok=True)
  start = time.time()
  records = []
  bar = tqdm(entries, desc="run_all", unit="experiment")
  for entry in bar:
    bar.set_postfix_str(entry.module)
    records.append(run_entry(entry, scale, args.out, args.timeout))
    bar.write(f"{entry.module}: {records[-1]['experiment']['status']} "
              f"({records[-1]['experiment']['wall_time_s']:.0f} s)")
  report = {"scale": scale, "argv": list(argv if argv is not None else sys.argv[1:]),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "wall_time_s": round(time.time() - start, 1), "machine": machine_info(),
            "entries": records}
  with open(os.path.join(args.out, "report.json"), "w") as f:
    json.dump(report, f, indent=1)
  text = format_report(report)
  with open(os.path.join(args.out, "REPORT.md"), "w") as f:
    f.write(text)
  print(text.split("\n## ")[0])
  print(f"report: {os.path.join(args.out, 'REPORT.md')}")
  return report


if __name__ == "__main__":
  main()
