"""Chunked training with orbax checkpoints, re-exported from :mod:`jaxlab.training.chunks`."""

from jaxlab.training.chunks import ChunkFn, run_chunks

__all__ = ["ChunkFn", "run_chunks"]
