"""OGBench locomaze datasets: load them as single-task offline RL data, or regenerate them locally.

File format (what ``ogbench.download_datasets`` fetches, e.g.
``~/.ogbench/data/pointmaze-medium-navigate-v0.npz`` and its ``-val.npz`` twin): one ``.npz`` with
one row per environment step, episodes laid end to end,

  ``observations`` float32 ``(N, ob_dim)``  the observation *before* the step (pointmaze: x, y)
  ``actions``      float32 ``(N, 2)``       the action taken from it, in [-1, 1]
  ``terminals``    bool    ``(N,)``         True on the last row of each episode
  ``qpos``/``qvel`` float32 ``(N, nq)``     the MuJoCo state of that row (``info['prev_qpos']``)

The last row of an episode has no successor; ``ogbench.utils.load_dataset`` drops it and builds
``next_observations`` by shifting, so a file with E episodes of T + 1 rows gives E * T transitions.

:func:`load_dataset` reads such a file through OGBench's own loader (``ogbench.utils.load_dataset``
with ``add_info=True``) and labels it for one task with OGBench's own relabelling
(``ogbench.relabel_utils.relabel_dataset``, the code ``ogbench.make_env_and_datasets`` runs for
``*-singletask-task{k}-v0`` names and that FQL trains on): the reward of transition (s, a, s') is
0 if the agent's position in s is within the goal tolerance (1.0 for pointmaze) of task k's goal,
and -1 otherwise; ``masks = 1 - success`` (0 at success, so the critic does not bootstrap there);
``terminals`` keep marking episode ends only (the data episodes do not stop at the goal). The goal
is the task's fixed goal cell centre (single-task envs add no goal noise), taken from the env.
Dataset rewards have always been r(s); since ogbench 1.2.0 the single-task envs also compute their
reward / success from s (``success_timing='pre'``), matching them (before: from s').

Users with internet can point :func:`load_dataset` at OGBench's downloaded files (run
``ogbench.download_datasets(['pointmaze-medium-navigate-v0'])`` once). Without it,
``python -m experiments.make_ogbench_data`` regenerates a navigate dataset in the same format with
:func:`generate` / :func:`save`, from the scripted oracle OGBench's pointmaze data uses.

``ogbench`` (and ``mujoco``) are an optional extra, ``pip install -e '.[ogbench]'``; they are
imported only inside the functions that need them.
"""

from __future__ import annotations

import os
import re
import zipfile
from typing import Any

import numpy as np

FILE_KEYS = ("observations", "actions", "terminals", "qpos", "qvel")
RL_KEYS = ("observations", "actions", "rewards", "next_observations", "masks", "terminals")
DATASET_TYPES = ("navigate", "stitch", "explore", "path")
_NAME_RE = re.compile(r"^(?P<env>.+)-(?P<kind>[a-z]+)-(?P<version>v\d+)$")


def _import_ogbench():
  try:
    import ogbench  # noqa: F401  (registers the gymnasium envs)
    import ogbench.relabel_utils
    import ogbench.utils
  except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
      "OGBench datasets need the optional extra: pip install -e '.[ogbench]' "
      "(or pip install ogbench mujoco)"
    ) from e
  return ogbench


def dataset_name_from_path(path: str | os.PathLike) -> str:
  """``.../pointmaze-medium-navigate-v0-val.npz`` -> ``pointmaze-medium-navigate-v0``."""
  name = os.path.basename(os.fspath(path))
  if name.endswith(".npz"):
    name = name[: -len(".npz")]
  if name.endswith("-val"):
    name = name[: -len("-val")]
  return name


def singletask_env_name(dataset_name: str, task_id: int) -> str:
  """``pointmaze-medium-navigate-v0``, 1 -> ``pointmaze-medium-singletask-task1-v0``."""
  m = _NAME_RE.match(dataset_name)
  if m is None or m["kind"] not in DATASET_TYPES:
    raise ValueError(
      f"cannot read an OGBench dataset name from {dataset_name!r}: expected "
      f"'<env>-<{'|'.join(DATASET_TYPES)}>-v<k>' such as 'pointmaze-medium-navigate-v0' "
      "(name the file that way or pass dataset_name=)"
    )
  return f"{m['env']}-singletask-task{task_id}-{m['version']}"


def check_file(path: str | os.PathLike, keys: tuple[str, ...] = FILE_KEYS) -> None:
  """Raise ``ValueError`` unless ``path`` is an ``.npz`` holding ``keys`` with matching lengths.

  Needs only numpy (runs before ``ogbench`` is imported).
  """
  path = os.fspath(path)
  if not os.path.isfile(path):
    raise ValueError(
      f"OGBench dataset file not found: {path!r}. Download it with "
      "ogbench.download_datasets([...]) or regenerate it with "
      "`python -m experiments.make_ogbench_data --out PATH`."
    )
  try:
    f = np.load(path, allow_pickle=False)
  except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
    raise ValueError(f"{path!r} is not a readable .npz file: {e}") from e
  if not isinstance(f, np.lib.npyio.NpzFile):
    raise ValueError(f"{path!r} is a single .npy array, not an .npz of named arrays")
  with f:
    present = set(f.files)
    lengths = {k: f[k].shape[0] if f[k].ndim else 0 for k in keys if k in present}
  missing = [k for k in keys if k not in present]
  if missing:
    raise ValueError(
      f"{path!r} is not an OGBench locomaze dataset: missing keys {missing} "
      f"(has {sorted(present)}; expected {list(keys)})"
    )
  if len(set(lengths.values())) != 1:
    raise ValueError(f"{path!r}: arrays have different numbers of rows: {lengths}")
  if lengths[keys[0]] < 2:
    raise ValueError(f"{path!r}: too few rows ({lengths[keys[0]]})")


def load_dataset(
  path: str | os.PathLike,
  *,
  task_id: int = 1,
  dataset_name: str | None = None,
  action_clip_eps: float | None = None,
) -> dict[str, np.ndarray]:
  """Single-task offline RL dataset from an OGBench-format locomaze ``.npz``.

  Args:
    path: the ``.npz`` (downloaded by OGBench or written by :func:`save`).
    task_id: OGBench evaluation task (1..5) whose goal defines the reward.
    dataset_name: e.g. ``'pointmaze-medium-navigate-v0'``; default: the file name (OGBench's).
    action_clip_eps: if set, clip actions to ``[-1 + eps, 1 - eps]`` (FQL uses 1e-5 so that
      tanh-squashed policies have finite log-probabilities); default: as stored, in [-1, 1].

  Returns:
    float32 arrays ``observations``, ``actions``, ``rewards`` (0 at the task goal, else -1),
    ``next_observations``, ``masks`` (``1 - success``) and ``terminals`` (1 on each episode's
    last transition), all with the same leading length.

  Raises:
    ValueError: missing/unreadable file, missing keys, or a name that is not an OGBench dataset.
  """
  path = os.fspath(path)
  check_file(path)
  dataset_name = dataset_name or dataset_name_from_path(path)
  env_name = singletask_env_name(dataset_name, task_id)
  if "maze" not in env_name:
    raise ValueError(f"only locomaze datasets (pointmaze/antmaze/humanoidmaze) here: {env_name!r}")

  ogbench = _import_ogbench()
  import gymnasium

  if env_name not in gymnasium.registry:
    raise ValueError(f"OGBench has no environment {env_name!r} (bad dataset name or task_id?)")
  # The same steps as ogbench.make_env_and_datasets(f'...-singletask-task{k}-v0',
  # dataset_path=path), less the '-val.npz' file it also insists on reading.
  env = gymnasium.make(env_name)
  try:
    raw = ogbench.utils.load_dataset(path, compact_dataset=False, add_info=True)
    ogbench.relabel_utils.relabel_dataset(env_name, env, raw)
  finally:
    env.close()

  out = {k: np.asarray(raw[k], dtype=np.float32) for k in RL_KEYS}
  if action_clip_eps is not None:
    out["actions"] = np.clip(out["actions"], -1 + action_clip_eps, 1 - action_clip_eps)
  return out


# --------------------------------------------------------------------------- generation


def _maze_cells(maze_map: np.ndarray) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
  """(all free cells, free cells that are not the middle of a straight corridor)."""
  free, vertices = [], []
  for i in range(maze_map.shape[0]):
    for j in range(maze_map.shape[1]):
      if maze_map[i, j] != 0:
        continue
      free.append((i, j))
      up, down = maze_map[i - 1, j] == 0, maze_map[i + 1, j] == 0
      left, right = maze_map[i, j - 1] == 0, maze_map[i, j + 1] == 0
      if (up and down and not left and not right) or (left and right and not up and not down):
        continue  # a corridor cell: OGBench samples goals only at corners/junctions/rooms
      vertices.append((i, j))
  return free, vertices


def _cells_at_distance(maze_map: np.ndarray, start: tuple[int, int], dist: int):
  """Free cells exactly ``dist`` BFS steps from ``start``."""
  seen = {start: 0}
  frontier, out = [start], []
  while frontier:
    nxt = []
    for i, j in frontier:
      for di, dj in ((-1, 0), (0, -1), (1, 0), (0, 1)):
        c = (i + di, j + dj)
        if c not in seen and maze_map[c] == 0:
          seen[c] = seen[(i, j)] + 1
          (out if seen[c] == dist else nxt).append(c)
    frontier = nxt
  return out


def generate(
  env_name: str = "pointmaze-medium-navigate-v0",
  num_episodes: int = 200,
  max_steps: int = 1000,
  seed: int = 0,
  *,
  noise: float = 0.5,
  progress: bool = False,
  return_stats: bool = False,
) -> dict[str, np.ndarray] | tuple[dict[str, np.ndarray], dict[str, Any]]:
  """Collect a pointmaze dataset with OGBench's scripted oracle, in OGBench's file format.

  Follows OGBench's locomaze collection (``data_gen_scripts/generate_locomaze.py`` with the
  flags of its published pointmaze commands: ``--noise=0.5 --max_episode_steps=1001``): the env
  is made with ``terminate_at_goal=False``; each episode starts in a uniformly random free cell
  and gets a goal in a random non-corridor cell (both jittered by the env's uniform noise); at
  every step the action is the unit vector from the agent to the env's BFS oracle subgoal
  (``get_oracle_subgoal``, the centre of the next cell on a shortest path) plus N(0, noise^2),
  clipped to [-1, 1]; for 'navigate', whenever the goal is reached a new random non-corridor goal
  is set and the episode goes on ('stitch': a goal 4 cells away, no resampling; 'explore': a
  random direction every 10 steps; 'path': one goal, no resampling).

  A quirk kept from the original: the oracle steers to the centre of the goal's cell, and a goal
  jittered more than the tolerance (1.0) from that centre (about 1 - pi/4 = 21% of goals) is
  then reached only by rare noise excursions, so the agent mostly hovers at the cell centre,
  often for the rest of the episode.

  Args:
    env_name: dataset name ``'<env>-<type>-v0'`` (``pointmaze-medium-navigate-v0``) or env name.
    num_episodes: episodes to collect.
    max_steps: transitions per episode (OGBench: 1000); each episode stores ``max_steps + 1``
      rows, the last one being the final observation (dropped by the loader).
    seed: seeds numpy's global RNG (which the env's goal/start noise uses) and the env.
    noise: std of the Gaussian action noise.
    progress: show a tqdm progress bar.
    return_stats: also return a dict of collection statistics.

  Returns:
    ``{'observations', 'actions', 'terminals', 'qpos', 'qvel'}`` (float32, terminals bool), and
    with ``return_stats`` also ``{'goals_reached': (E,) int, 'first_goal_step': (E,) int or -1,
    'steps': int, 'seconds': float}``.
  """
  _import_ogbench()
  import time

  import gymnasium
  from tqdm.auto import tqdm

  m = _NAME_RE.match(env_name)
  if m is not None and m["kind"] in DATASET_TYPES:
    base_env, dataset_type = f"{m['env']}-{m['version']}", m["kind"]
  else:
    base_env, dataset_type = env_name, "navigate"
  if not base_env.startswith("pointmaze-"):
    raise ValueError(f"the scripted oracle drives the point mass only: {env_name!r}")
  if num_episodes < 1 or max_steps < 1:
    raise ValueError(f"num_episodes and max_steps must be >= 1: {num_episodes}, {max_steps}")

  np.random.seed(seed)  # noqa: NPY002  (the env's add_noise and task sampling use it)
  rng = np.random.default_rng(seed)
  env = gymnasium.make(base_env, terminate_at_goal=False, max_episode_steps=max_steps + 1)
  env.action_space.seed(seed)
  u = env.unwrapped
  maze_map = np.asarray(u.maze_map)
  free, vertices = _maze_cells(maze_map)

  rows = num_episodes * (max_steps + 1)
  ob_dim = env.observation_space.shape[0]
  nq, nv = u.model.nq, u.model.nv
  data = {
    "observations": np.zeros((rows, ob_dim), np.float32),
    "actions": np.zeros((rows, 2), np.float32),
    "terminals": np.zeros((rows,), bool),
    "qpos": np.zeros((rows, nq), np.float32),
    "qvel": np.zeros((rows, nv), np.float32),
  }
  goals_reached = np.zeros(num_episodes, np.int64)
  first_goal_step = np.full(num_episodes, -1, np.int64)

  t0 = time.perf_counter()
  r = 0
  bar = tqdm(total=rows, disable=not progress, unit="step", desc=base_env, smoothing=0.1)
  for ep in range(num_episodes):
    init_ij = free[rng.integers(len(free))]
    if dataset_type == "stitch":
      near = _cells_at_distance(maze_map, init_ij, 4)
      goal_ij = near[rng.integers(len(near))] if near else init_ij
    else:
      goal_ij = vertices[rng.integers(len(vertices))]
    task_info = {"init_ij": init_ij, "goal_ij": goal_ij}
    ob, _ = env.reset(seed=seed if ep == 0 else None, options={"task_info": task_info})
    direction = None
    step, done = 0, False
    while not done:
      xy = u.get_xy()
      if dataset_type == "explore":
        if step % 10 == 0:
          direction = rng.standard_normal(2)
          direction = direction / (np.linalg.norm(direction) + 1e-6)
      else:
        subgoal_xy, _ = u.get_oracle_subgoal(xy, u.cur_goal_xy)
        direction = subgoal_xy - xy
        direction = direction / (np.linalg.norm(direction) + 1e-6)
      action = np.clip(direction + rng.normal(0.0, noise, 2), -1.0, 1.0)

      next_ob, _, terminated, truncated, info = env.step(action)
      done = terminated or truncated
      if info["success"]:
        if first_goal_step[ep] < 0:
          first_goal_step[ep] = step
        if dataset_type == "navigate":
          goals_reached[ep] += 1
          new_ij = vertices[rng.integers(len(vertices))]
          # set_goal(goal_ij=...) would jitter the goal but leave the target geom at NaN.
          u.set_goal(goal_xy=u.add_noise(u.ij_to_xy(new_ij)))
      data["observations"][r] = ob
      data["actions"][r] = action
      data["terminals"][r] = done
      data["qpos"][r] = info["prev_qpos"]
      data["qvel"][r] = info["prev_qvel"]
      ob = next_ob
      r += 1
      step += 1
    if dataset_type != "navigate":
      goals_reached[ep] = int(first_goal_step[ep] >= 0)
    bar.update(step)
  bar.close()
  env.close()
  seconds = time.perf_counter() - t0
  if r != rows:  # episodes end only by truncation (terminate_at_goal=False)
    data = {k: v[:r] for k, v in data.items()}
  if not return_stats:
    return data
  stats = {
    "goals_reached": goals_reached,
    "first_goal_step": first_goal_step,
    "steps": r,
    "seconds": seconds,
  }
  return data, stats


def save(path: str | os.PathLike, data: dict[str, np.ndarray]) -> str:
  """Write ``data`` as OGBench does (``np.savez_compressed``, its dtypes); returns the path."""
  path = os.fspath(path)
  if not path.endswith(".npz"):
    raise ValueError(f"OGBench dataset files end in .npz: {path!r}")
  missing = [k for k in FILE_KEYS if k not in data]
  if missing:
    raise ValueError(f"data lacks keys {missing}")
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  arrays = {
    k: np.asarray(v, dtype=bool if k == "terminals" else np.float32) for k, v in data.items()
  }
  np.savez_compressed(path, **arrays)
  return path


def split_episodes(
  data: dict[str, np.ndarray], num_first: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
  """Split a file-format dict after its ``num_first``-th episode (e.g. train / val)."""
  ends = np.flatnonzero(data["terminals"])
  if not 0 < num_first < len(ends):
    raise ValueError(f"cannot split {len(ends)} episodes after episode {num_first}")
  cut = int(ends[num_first - 1]) + 1
  return {k: v[:cut] for k, v in data.items()}, {k: v[cut:] for k, v in data.items()}
