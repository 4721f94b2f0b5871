"""Agents by name: one table instead of if/elif chains in experiments and trainers.

A registered agent is an :class:`AgentSpec`: the agent class (an immutable pytree
with ``create``, ``update`` and ``sample_actions``) and its config factory
(keyword fields -> the agent's frozen config). An experiment names its arms
after registered agents plus the fields that make the arm; a new agent is one
:func:`register` call next to its module, and every script that looks agents
up by name can run it.

Registered here: ``"fac"`` (Flow Actor-Critic), ``"unregularized"`` (FAC with the
critic penalty off; the distillation-free arm trains no flow), ``"fql"`` (Flow
Q-Learning), ``"gcsac"`` (goal-conditioned SAC, the low level of
:mod:`jaxlab.rl.hrl`) and ``"dipper"`` (DIPPER's DPO-trained high level).

Example:
  >>> agent_cls, config = make("fac", hidden_dims=(64, 64), pretrain_steps=1000)
  >>> agent = agent_cls.create(0, obs, actions, config)
  >>> register("fac_strong_penalty", FACAgent, functools.partial(FACConfig, alpha=3.0))
  >>> get("sac")
  ValueError: unknown agent 'sac'; registered agents: ('fac', 'unregularized', ...)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from jaxlab.rl.agents import unregularized
from jaxlab.rl.agents.dipper import DipperConfig, DipperHigh
from jaxlab.rl.agents.fac import FACAgent, FACConfig
from jaxlab.rl.agents.fql import FQLAgent, FQLConfig
from jaxlab.rl.agents.gcsac import SACAgent, SACConfig


class AgentSpec(NamedTuple):
  """A registered agent: its class and its config factory."""

  agent: type  # create(...) -> agent; agent.update(batch) -> (agent, info); sample_actions
  config: Callable[..., Any]  # config(**fields) -> the agent's frozen config
  description: str = ""  # one line, shown by describe()


_REGISTRY: dict[str, AgentSpec] = {}


def names() -> tuple[str, ...]:
  """The registered agent names, in registration order."""
  return tuple(_REGISTRY)


def register(name: str, agent: type, config: Callable[..., Any], *, description: str = "",
             replace: bool = False) -> AgentSpec:
  """Registers ``agent`` with its config factory under ``name``.

  Args:
    name: a non-empty string, unique unless ``replace``.
    agent: the agent class; it must have ``create`` and ``update``.
    config: ``config(**fields)`` returns the agent's configuration (a config
      dataclass, or a factory such as :func:`jaxlab.rl.agents.unregularized.get_config`).
    description: one line on what the agent is.
    replace: allow overwriting an existing registration.

  Returns:
    The stored :class:`AgentSpec`.
  """
  if not isinstance(name, str) or not name:
    raise ValueError(f"name must be a non-empty string, got {name!r}")
  if name in _REGISTRY and not replace:
    raise ValueError(f"agent {name!r} is already registered "
                     f"({_REGISTRY[name].agent.__name__}); pass replace=True to overwrite it")
  missing = [m for m in ("create", "update") if not callable(getattr(agent, m, None))]
  if missing:
    raise TypeError(f"agent must be an agent class with create and update, {agent!r} lacks "
                    f"{missing}")
  if not callable(config):
    raise TypeError(f"config must be a callable config factory, got {config!r}")
  spec = AgentSpec(agent, config, description)
  _REGISTRY[name] = spec
  return spec


def unregister(name: str) -> AgentSpec:
  """Removes ``name`` (e.g. an agent a test registered) and returns its spec."""
  spec = get(name)
  del _REGISTRY[name]
  return spec


def get(name: str) -> AgentSpec:
  """The :class:`AgentSpec` registered as ``name``; ``ValueError`` lists the accepted names."""
  try:
    return _REGISTRY[name]
  except (KeyError, TypeError):
    raise ValueError(f"unknown agent {name!r}; registered agents: {names()}") from None


def make(name: str, **fields: Any) -> tuple[type, Any]:
  """``(agent_class, config)`` of agent ``name`` with config ``fields`` set."""
  spec = get(name)
  return spec.agent, spec.config(**fields)


def describe() -> str:
  """One line per registered agent: name, class, description."""
  return "\n".join(f"{name}: {spec.agent.__name__}. {spec.description}".rstrip()
                   for name, spec in _REGISTRY.items())


register("fac", FACAgent, FACConfig,
         description="Flow Actor-Critic: density-weighted critic penalty + distillation to "
                     "a frozen behavior flow")
register("unregularized", FACAgent, unregularized.get_config,
         description="FAC with alpha = 0 (no critic penalty); distill = 0 trains no flow")
register("fql", FQLAgent, FQLConfig,
         description="Flow Q-Learning: one-step actor distilled from a jointly trained flow")
register("gcsac", SACAgent, SACConfig,
         description="goal-conditioned SAC (the low level, and HIER's high level, in rl.hrl)")
register("dipper", DipperHigh, DipperConfig,
         description="DIPPER's high level: subgoal policy trained by DPO on window preferences")
