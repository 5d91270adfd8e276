"""A package whose folder sits in the working directory: `attnspec verify attnpkg` imports it."""

from attnspec.subjects.reference import build, export_weights

__all__ = ["build", "export_weights"]
