"""The score scale applied twice: once folded into the query projection's output and once in
the kernel, as when a model's config scale meets a kernel's default 1/sqrt(D)."""

from _spec_common import PROTOCOL, SpecAttn, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})
VARIANTS = {"scale": "any"}


class ScaledTwice(SpecAttn):
    def scale(self):
        return super().scale() ** 2


def build(spec):
    return ScaledTwice(spec)


__all__ = ["EXPECTED", "PROTOCOL", "VARIANTS", "build", "export_weights"]
