"""Pure-JAX environments with gymnax's API.

``reset(key, params)`` and ``step(key, state, action, params)``, vmappable and jittable.

* :mod:`~jaxlab.envs.bandits`: K-armed Bernoulli / Gaussian bandits, arm means per episode
  ("LLMs are Greedy Agents").
* :mod:`~jaxlab.envs.grid_world`: frozen-lake and maze grids (4-6 cells) with the layout
  in the state, a new solvable layout per episode, rendered as one image token per cell
  (VPRL, issue 21).
* :mod:`~jaxlab.envs.multigoal_point`: a 2-D point with several goals (offline RL data).
* :mod:`~jaxlab.envs.point_maze`: PIPER's four-room point maze and a point that pushes a box.
"""

from jaxlab.envs import bandits
from jaxlab.envs.bandits import BanditParams, BanditState, MultiArmedBandit
from jaxlab.envs.grid_world import GridParams, GridState, GridWorld, distance_map, render
from jaxlab.envs.multigoal_point import (
    BehaviorParams,
    EnvParams,
    EnvState,
    MultiGoalPoint,
    behavior_action,
    evaluate,
    make_dataset,
)
from jaxlab.envs.point_maze import (
    MazeParams,
    MazeState,
    PointMaze,
    PointPush,
    PushParams,
    PushState,
    is_wall,
    make_layout,
    make_walls,
    wall_map,
)

__all__ = ["BanditParams", "BanditState", "BehaviorParams", "EnvParams", "EnvState", "GridParams",
           "GridState", "GridWorld", "MazeParams", "MazeState", "MultiArmedBandit",
           "MultiGoalPoint", "PointMaze", "PointPush", "PushParams", "PushState", "bandits",
           "behavior_action", "distance_map", "evaluate", "is_wall", "make_dataset", "make_layout",
           "make_walls", "render", "wall_map"]
