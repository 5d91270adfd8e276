"""Every inference hook written independently of attnspec's reference (tests/broken/
_spec_common.py's correct SpecAttn: a real cache, padding never read, bottom-right corner, zero
rows for queries that see no key). Every property must pass it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "broken"))

from _spec_common import (  # noqa: E402
    CORNER,
    PROTOCOL,
    SpecAttn,
    cross,
    decode,
    decode_padded,
    export_weights,
    padded,
    shifted,
)

EXPECTED: frozenset[str] = frozenset()
VARIANTS = {name: "any" for name in ("n_kv_head", "head_dim", "window", "scale", "softcap",
                                     "positions", "bias", "qk_norm", "sinks")}


def build(spec: object) -> SpecAttn:
    return SpecAttn(spec)  # type: ignore[arg-type]


__all__ = ["CORNER", "EXPECTED", "PROTOCOL", "VARIANTS", "build", "cross", "decode",
           "decode_padded", "export_weights", "padded", "shifted"]
