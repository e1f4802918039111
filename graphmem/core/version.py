"""graphmem's version, in the lowest layer so every output can name it."""

__version__ = "0.1.0"
