"""Offline-RL agents as immutable pytrees.

Each has ``create``, ``update``, ``sample_actions`` and ``get_config``.
:mod:`~jaxlab.rl.agents.registry` maps names to agent classes and config
factories (``registry.make("fac", ...)``), so experiments pick agents by name.
"""

from jaxlab.rl.agents import registry
from jaxlab.rl.agents.fac import FACAgent, FACConfig
from jaxlab.rl.agents.fql import FQLAgent, FQLConfig
from jaxlab.rl.agents.registry import AgentSpec
from jaxlab.rl.agents.unregularized import UnregularizedAgent

__all__ = ["AgentSpec", "FACAgent", "FACConfig", "FQLAgent", "FQLConfig", "UnregularizedAgent",
           "registry"]
