"""Pure-JAX environments with gymnax's API.

``reset(key, params)`` and ``step(key, state, action, params)``, vmappable and jittable.

* :mod:`~jaxlab.envs.grid_world`: frozen-lake and maze grids (4-6 cells) with the layout
  in the state, a new solvable layout per episode, rendered as one image token per cell
  (VPRL, issue 21).
"""

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

__all__ = ["BehaviorParams", "EnvParams", "EnvState", "GridParams", "GridState", "GridWorld",
           "MazeParams", "MazeState",
           "MultiGoalPoint", "PointMaze", "PointPush", "PushParams", "PushState",
           "behavior_action", "evaluate", "is_wall", "make_dataset", "make_layout", "make_walls",
           "distance_map", "render", "wall_map"]
