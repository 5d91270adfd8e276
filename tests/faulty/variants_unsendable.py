"""A protocol v2 subject whose VARIANTS lists a value that is not data: a lambda among the
windows (once a worker traceback and "killed its process while loading")."""

from attnspec.subjects.variants import build, export_weights

__all__ = ["PROTOCOL", "VARIANTS", "build", "export_weights"]

PROTOCOL = 2
VARIANTS = {"window": [4, lambda spec: 8]}
