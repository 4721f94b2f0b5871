"""The official sequential push-relabel, as a C++ program compiled at run time.

``push_relabel.cpp`` (this folder) runs the official C++ code's sequential
algorithm with its data structures and per-arrival work (see the file's head
comment for what differs: no exact tail, no ``exit(0)``). :func:`run` compiles
it once per source, compiler and flags into a cache folder (``$JAXLAB_CPP_CACHE``,
default ``<tmp>/jaxlab-cpp``), feeds it the instance through a pipe and parses
its report. :func:`find_compiler` returns ``None`` where there is no C++
compiler (``$CXX``, else ``c++``, ``g++`` or ``clang++`` on the ``PATH``);
callers skip then (CI needs no compiler).

Example::

  if find_compiler():
    out = run(servers, requests, repeats=3)
    out.server_of, out.seconds, out.counters["scans"]
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import struct
import subprocess
import tempfile
from typing import NamedTuple

import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "push_relabel.cpp")
# ISO C++17 (no GNU extensions) and no fused multiply-adds: distances bit-identical to
# Python's floats, as the official build (g++ -std=c++20) has them.
BASE_FLAGS = ("-std=c++17", "-ffp-contract=off")
MODES = {"official": 0, "flat": 1}
COUNTERS = ("pushes_free", "pushes_matched", "relabels", "moves_up", "placements", "scans",
            "servers_scanned")


class CppRun(NamedTuple):
  """What one call of the program reports (its last repeat).

  ``server_of``, ``level``, ``request_duals`` ``(mu + 2, k)`` and ``server_duals``
  ``(mu + 2, n)`` are the final state; after an overflow (``status ==
  "overflow"``: a dual passed the top level at arrival ``overflow_arrival``,
  where the official code exits) mode "official" reports the state before that
  arrival and mode "flat" none (empty arrays).
  """

  status: str
  overflow_arrival: int | None
  omega: float
  restarts: int
  cost: float
  counters: dict[str, int]
  seconds: list[float]  # all arrivals, one entry per repeat
  arrival_seconds: np.ndarray  # (k,) cumulative seconds after each arrival (last repeat)
  server_of: np.ndarray
  level: np.ndarray
  request_duals: np.ndarray
  server_duals: np.ndarray


def find_compiler() -> str | None:
  """``$CXX`` if set (``None`` if it names no executable), else the first of ``c++``,
  ``g++``, ``clang++`` on the ``PATH``, else ``None`` (also ``None`` when the source is
  missing, as in an installed wheel, which does not ship it)."""
  if not os.path.exists(SOURCE):
    return None
  cxx = os.environ.get("CXX")
  if cxx:
    return shutil.which(shlex.split(cxx)[0])
  for name in ("c++", "g++", "clang++"):
    path = shutil.which(name)
    if path:
      return path
  return None


def compiler_version(cxx: str) -> str:
  """The compiler's first ``--version`` line."""
  out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
  return (out.splitlines() or ["unknown"])[0]


def build(opt: str = "-O2", cxx: str | None = None) -> str:
  """Path of the compiled program (compiled on first use; cached by content).

  Args:
    opt: optimization flags (``"-O2"``; the official README builds with none, i.e. -O0).
    cxx: the compiler (default :func:`find_compiler`).

  Raises:
    RuntimeError: no compiler, or compilation failed (with its messages).
  """
  cxx = cxx or find_compiler()
  if cxx is None:
    raise RuntimeError("no C++ compiler found (set $CXX, or put c++, g++ or clang++ on PATH)")
  flags = [*shlex.split(opt), *BASE_FLAGS]
  with open(SOURCE, "rb") as f:
    source = f.read()
  key = hashlib.sha256(b"\0".join([source, cxx.encode(), compiler_version(cxx).encode(),
                                   " ".join(flags).encode()])).hexdigest()[:16]
  folder = os.environ.get("JAXLAB_CPP_CACHE", os.path.join(tempfile.gettempdir(), "jaxlab-cpp"))
  exe = os.path.join(folder, f"push_relabel-{key}")
  if os.path.exists(exe):
    return exe
  os.makedirs(folder, exist_ok=True)
  tmp = f"{exe}.{os.getpid()}.tmp"  # then an atomic rename: safe under parallel test workers
  proc = subprocess.run([cxx, *flags, SOURCE, "-o", tmp], capture_output=True, text=True,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"compiling {SOURCE} failed:\n{proc.stderr[-3000:]}")
  os.replace(tmp, exe)
  return exe


def run(servers, requests, *, delta: float = 0.001, eps: float = 0.2, levels: int = 5,
        repeats: int = 1, mode: str = "official", opt: str = "-O2",
        timeout: float | None = None) -> CppRun:
  """Runs every request through the program, ``repeats`` times from an empty state.

  Args:
    servers: ``(n, dim)`` coordinates (passed as float64: the C++ doubles).
    requests: ``(k, dim)`` coordinates, ``k <= n``, inserted in order.
    delta, eps, levels: the algorithm's parameters (``levels`` is the C++ ``mu``).
    repeats: timed runs (each from scratch; ``seconds`` has one entry per run).
    mode: "official" (the official data structures and per-arrival copies) or "flat".
    opt: optimization flags for :func:`build`.
    timeout: seconds before the program is stopped (``subprocess.TimeoutExpired``).
  """
  if mode not in MODES:
    raise ValueError(f"mode must be one of {tuple(MODES)}, got {mode!r}")
  s = np.ascontiguousarray(servers, np.float64)
  r = np.ascontiguousarray(requests, np.float64)
  if s.ndim != 2 or r.ndim != 2 or r.shape[1] != s.shape[1] or len(r) > len(s):
    raise ValueError(f"servers (n, dim) and requests (k <= n, dim) expected, got {s.shape} "
                     f"and {r.shape}")
  n, dim = s.shape
  header = struct.pack("=6q", n, len(r), dim, levels, repeats, MODES[mode])
  payload = header + struct.pack("=2d", delta, eps) + s.tobytes() + r.tobytes()
  proc = subprocess.run([build(opt)], input=payload, capture_output=True, timeout=timeout,
                        check=False)
  if proc.returncode != 0:
    raise RuntimeError(f"the C++ program failed (exit {proc.returncode}): "
                       f"{proc.stderr.decode()[-2000:]}")
  lines = {}
  for line in proc.stdout.decode().splitlines():
    name, _, rest = line.partition(" ")
    lines[name] = rest.split()
  status = lines["status"]
  words = lines["counters"]
  ints = lambda key: np.array([int(x) for x in lines[key]], np.int64)
  big_l = levels + 2
  duals = ints("request_duals")
  return CppRun(
      status=status[0],
      overflow_arrival=int(status[1]) if status[0] == "overflow" else None,
      omega=float(lines["omega"][0]),
      restarts=int(lines["restarts"][0]),
      cost=float(lines["cost"][0]),
      counters={words[i]: int(words[i + 1]) for i in range(0, len(words), 2)},
      seconds=[float(x) for x in lines["seconds"]],
      arrival_seconds=np.array([float(x) for x in lines["arrival_seconds"]]),
      server_of=ints("server_of"),
      level=ints("level"),
      request_duals=duals.reshape(big_l, len(duals) // big_l),
      server_duals=ints("server_duals").reshape(-1, n) if lines["server_duals"] else
      np.zeros((0, n), np.int64),
  )
