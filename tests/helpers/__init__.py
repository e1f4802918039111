"""Helpers shared by the test files: test files import these (and conftest.py's fixtures),
never each other. Kept by subject; only torch_nets.py imports torch."""
