"""Ignores q and k: every query returns the mean of the values it may see, the output of a
softmax over equal scores (KernelBench-style cheat; also a kernel whose scores never reach the
softmax). attnspec's small random weights at unit inputs make the true softmax nearly uniform
(logits of std 0.3), yet the oracle still sees it there (max error 0.25 over 15 examples, bfloat16
and float32, 2026-12-02); at inputs x5 it is off by 6.7."""

from _common import Attention, export_weights

EXPECTED = frozenset({"oracle", "oracle_grad"})


class MeanOfValues(Attention):
    def scale(self, q, k):
        return 0.0


def build(n_embd: int, n_head: int) -> MeanOfValues:
    return MeanOfValues(n_embd, n_head)


__all__ = ["EXPECTED", "build", "export_weights"]
