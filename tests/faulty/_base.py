"""The reference, for faulty subjects to misbehave around."""

from attnspec.subjects.reference import build as reference_build
from attnspec.subjects.reference import export_weights as export_weights

__all__ = ["export_weights", "reference_build"]
