"""Given ALiBi slopes ignored: the paper's slopes for H heads are used whatever the model's
own are (a port of Falcon-RW onto a BLOOM kernel, which rebuilds the slopes from H)."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

from attnspec import ALiBi

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"positions": [ALiBi(slopes=(0.0, 1.0, 0.125, 0.5)),
                          ALiBi(slopes=tuple(s / 2 for s in (0.5, 0.25, 0.125, 0.0625)))],
            "n_kv_head": "any"}


class SlopesIgnored(SpecAttn):
    def slopes(self, H):
        return self.paper_slopes(H)


def build(spec):
    return SlopesIgnored(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
