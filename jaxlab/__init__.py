"""jaxlab: pure-function JAX reimplementations of ICLR 2026 methods."""

__version__ = "0.1.0"
