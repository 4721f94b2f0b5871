"""The agent registry: names, config factories, errors, and building a registered agent."""

import dataclasses
import functools

import jax.numpy as jnp
import pytest

from jaxlab.rl.agents import registry
from jaxlab.rl.agents.dipper import DipperConfig, DipperHigh
from jaxlab.rl.agents.fac import FACAgent, FACConfig
from jaxlab.rl.agents.fql import FQLAgent, FQLConfig
from jaxlab.rl.agents.gcsac import SACAgent, SACConfig


def test_builtin_agents():
  assert registry.names() == ("fac", "unregularized", "fql", "gcsac", "dipper")
  expected = {"fac": (FACAgent, FACConfig), "fql": (FQLAgent, FQLConfig),
              "gcsac": (SACAgent, SACConfig), "dipper": (DipperHigh, DipperConfig)}
  for name, (agent, config) in expected.items():
    spec = registry.get(name)
    assert spec.agent is agent and spec.config is config and spec.description
  assert registry.describe().count("\n") == len(registry.names()) - 1


def test_make_applies_fields_through_the_factory():
  agent, cfg = registry.make("fac", hidden_dims=(8,), pretrain_steps=7)
  assert agent is FACAgent and cfg == FACConfig(hidden_dims=(8,), pretrain_steps=7)
  # the ablation's factory: alpha 0 always; no distillation also means no flow training
  agent, cfg = registry.make("unregularized", distill=0.0, batch_size=4)
  assert agent is FACAgent and (cfg.alpha, cfg.distill, cfg.pretrain_steps) == (0.0, 0.0, 0)
  assert registry.make("unregularized")[1].pretrain_steps == FACConfig().pretrain_steps
  with pytest.raises(TypeError, match="not_a_field"):
    registry.make("fql", not_a_field=1)


def test_unknown_names_list_the_accepted_ones():
  with pytest.raises(ValueError, match=r"unknown agent 'sac'; registered agents: \('fac', "):
    registry.get("sac")
  with pytest.raises(ValueError, match="registered agents"):
    registry.make(None)


def test_register_checks_and_replaces():
  with pytest.raises(ValueError, match="already registered"):
    registry.register("fac", FACAgent, FACConfig)
  with pytest.raises(ValueError, match="non-empty"):
    registry.register("", FACAgent, FACConfig)
  with pytest.raises(TypeError, match="create and update"):
    registry.register("bad", dict, FACConfig)
  with pytest.raises(TypeError, match="config factory"):
    registry.register("bad", FACAgent, FACConfig())
  strong = functools.partial(FACConfig, alpha=3.0)
  try:
    registry.register("fac_strong", FACAgent, strong, description="penalty x3")
    assert registry.names()[-1] == "fac_strong"
    agent_cls, cfg = registry.make("fac_strong", hidden_dims=(8,))
    assert cfg.alpha == 3.0 and cfg.hidden_dims == (8,)
    # a registered agent is built like any other: create from example data, config kept
    obs, act = jnp.zeros((1, 3)), jnp.zeros((1, 2))
    agent = agent_cls.create(0, obs, act, cfg)
    assert agent.get_config() == dataclasses.asdict(cfg)
    registry.register("fac_strong", FACAgent, FACConfig, replace=True)
    assert registry.make("fac_strong")[1].alpha == 1.0
  finally:
    registry.unregister("fac_strong")
  assert "fac_strong" not in registry.names()
  with pytest.raises(ValueError, match="unknown agent"):
    registry.unregister("fac_strong")
