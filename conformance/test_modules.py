"""Every built-in module subject but the reference (test_reference.py), one test per property;
those that need an extra (transformers) only where it is installed."""

import importlib.util

from attnspec.subjects import BUILTIN, EXTRAS

ATTNSPEC_SUBJECT = [f"attnspec.subjects.{name}" for name in BUILTIN if name != "reference"
                    and (name not in EXTRAS or importlib.util.find_spec(EXTRAS[name]))]
