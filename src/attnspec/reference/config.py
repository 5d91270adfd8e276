"""The attention configuration, validated when it is made."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import ConfigError, DivisibilityError


def divisors(n: int) -> list[int]:
    """The head counts that divide a width `n`, ascending."""
    small = [h for h in range(1, int(n**0.5) + 1) if n % h == 0]
    return sorted(set(small) | {n // h for h in small})


def _check_count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"Invalid attention configuration: {name}={value!r} ({type(value).__name__}); "
            f"{name} must be an int >= 1."
        )
    if value < 1:
        raise ConfigError(
            f"Invalid attention configuration: {name}={value}; {name} must be >= 1."
        )
    return value


def check_config(n_embd: object, n_head: object) -> tuple[int, int]:
    """Validate (n_embd, n_head) and return them; raise `ConfigError` / `DivisibilityError`."""
    c = _check_count("n_embd", n_embd)
    h = _check_count("n_head", n_head)
    if c % h != 0:
        raise DivisibilityError(
            f"Invalid attention configuration (n_embd={c}, n_head={h}): n_embd must be "
            f"divisible by n_head, but head_dim would be {c}/{h} = {round(c / h, 3)}, not a whole "
            f"number. Head counts that divide n_embd={c}: {', '.join(map(str, divisors(c)))}."
        )
    return c, h


@dataclass(frozen=True)
class AttentionConfig:
    """The shape of one causal multi-head self-attention layer.

    Validated on construction, so an impossible configuration fails here, with the reason,
    instead of later as a reshape error.

    ```python
    AttentionConfig(n_embd=12, n_head=3).head_dim  # 4
    AttentionConfig(n_embd=10, n_head=3)           # DivisibilityError: ... 1, 2, 5, 10.
    ```

    **Arguments:**

    - `n_embd`: C, the residual width.
    - `n_head`: H, the number of heads; must divide `n_embd`.
    - `bias`: whether the q/k/v and output projections have biases.
    """

    n_embd: int
    n_head: int
    bias: bool = True

    def __post_init__(self) -> None:
        check_config(self.n_embd, self.n_head)

    @property
    def head_dim(self) -> int:
        """D = C / H, the channels each head sees."""
        return self.n_embd // self.n_head
