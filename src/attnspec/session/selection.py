"""Which properties a run checks: `only` and `skip` over each family's ids."""

from __future__ import annotations

from collections.abc import Iterable

from .._errors import UsageError
from ..properties import PROPERTY_IDS
from ..properties.kernel import KERNEL_PROPERTY_IDS

PROPERTIES: tuple[str, ...] = PROPERTY_IDS
"""The property ids, in the order they run (docs/design.md's table, then device_agreement)."""
KERNEL_PROPERTIES: tuple[str, ...] = KERNEL_PROPERTY_IDS
"""A kernel subject's property ids, in the order they run."""
_ANY_IDS: tuple[str, ...] = (*PROPERTIES, *(p for p in KERNEL_PROPERTIES if p not in PROPERTIES))


def _split_ids(values: Iterable[str] | str | None, option: str) -> list[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    ids = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not ids and option == "only":
        raise UsageError(option=option, value=",".join(values),
                         reason=f"names no property id; the ids are {', '.join(PROPERTIES)} "
                                f"(modules) and {', '.join(KERNEL_PROPERTIES)} (kernels).")
    unknown = [i for i in ids if i not in _ANY_IDS]
    if unknown:
        raise UsageError(option=option, value=",".join(ids),
                         reason=f"unknown property id {', '.join(map(repr, unknown))}; the ids "
                                f"are {', '.join(PROPERTIES)} (modules) and "
                                f"{', '.join(KERNEL_PROPERTIES)} (kernels).")
    return ids


def select_properties(only: Iterable[str] | str | None = None,
                      skip: Iterable[str] | str | None = None, *,
                      kernel: bool | None = False) -> list[str]:
    """The ids to run, in running order, of a module's catalogue or a kernel's (None: either,
    before the subject is loaded; the ids are only checked to exist)."""
    if kernel is None:
        chosen = _split_ids(only, "only")
        _split_ids(skip, "skip")
        if chosen is None:
            return list(PROPERTIES)
        return [p for p in _ANY_IDS if p in chosen]
    family = KERNEL_PROPERTIES if kernel else PROPERTIES
    chosen = _split_ids(only, "only") or list(family)
    skipped = set(_split_ids(skip, "skip") or ())
    other = [p for p in chosen if p not in family]
    if other and only is not None:
        kind, theirs = ("a kernel", "module") if kernel else ("a module", "kernel")
        raise UsageError(option="only", value=",".join(chosen),
                         reason=f"{', '.join(other)} {'is' if len(other) == 1 else 'are'} "
                                f"{theirs} properties, and the subject is {kind}; its ids are "
                                f"{', '.join(family)}.")
    props = [p for p in family if p in chosen and p not in skipped]
    if not props:
        raise UsageError(option="skip", value=",".join(sorted(skipped)),
                         reason=f"leaves no property to run of {', '.join(chosen)}.")
    return props
