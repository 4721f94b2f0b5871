"""Pure-JAX environments with gymnax's API.

``reset(key, params)`` and ``step(key, state, action, params)``, vmappable and jittable.
"""

from jaxlab.envs.multigoal_point import (
    BehaviorParams,
    EnvParams,
    EnvState,
    MultiGoalPoint,
    behavior_action,
    evaluate,
    make_dataset,
)

__all__ = ["BehaviorParams", "EnvParams", "EnvState", "MultiGoalPoint", "behavior_action",
           "evaluate", "make_dataset"]
