"""graphmem: static GPU memory and compute analysis of deep-learning models."""

__version__ = "0.1.0"
