"""Objects inside a module, named with :NAME."""

from attnspec import CausalSelfAttention


def make(n_embd, n_head):
    return CausalSelfAttention(n_embd, n_head)


class Namespace:
    @staticmethod
    def build(n_embd, n_head):
        return CausalSelfAttention(n_embd, n_head)


not_callable = 42
