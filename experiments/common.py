"""Helpers every experiment script shares: scale selection and writing results."""

from __future__ import annotations

import argparse
import json
import os

import jax


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
