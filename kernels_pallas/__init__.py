"""Pallas kernels, each with a jitted wrapper and a plain-jnp reference.

Each kernel's path (Triton on GPU, Mosaic on TPU, the reference on CPU) is
chosen by the platform the computation is lowered for
(``lax.platform_dependent``), not by ``jax.default_backend()``, so an export
for another platform gets that platform's kernel. ``interpret=True`` runs the
GPU layout in Pallas' interpreter, a ``pltpu.InterpretParams`` (where a kernel
accepts one) the TPU layout in the TPU interpreter.
"""
