"""Pallas kernels, each with a jitted wrapper and a plain-jnp reference."""
