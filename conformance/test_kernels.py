"""Every built-in kernel subject (PROTOCOL = "kernel"), one test per kernel property."""

from attnspec.subjects import KERNEL_BUILTIN

ATTNSPEC_SUBJECT = [f"attnspec.subjects.{name}" for name in KERNEL_BUILTIN]
