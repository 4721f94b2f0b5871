"""Offline-RL agents as immutable pytrees.

Each has ``create``, ``update``, ``sample_actions`` and ``get_config``.
"""

from jaxlab.rl.agents.fac import FACAgent, FACConfig
from jaxlab.rl.agents.fql import FQLAgent, FQLConfig
from jaxlab.rl.agents.unregularized import UnregularizedAgent

__all__ = ["FACAgent", "FACConfig", "FQLAgent", "FQLConfig", "UnregularizedAgent"]
