"""The attention configuration: head_dim, divisors, and the errors of impossible configurations."""

from __future__ import annotations

import dataclasses
import re

import pytest

import attnspec
from attnspec import AttentionConfig, CausalSelfAttention, ConfigError, DivisibilityError

DIVISIBILITY_10_3 = (
    "Invalid attention configuration (n_embd=10, n_head=3): n_embd must be divisible by "
    "n_head, but head_dim would be 10/3 = 3.333, not a whole number. Head counts that divide "
    "n_embd=10: 1, 2, 5, 10."
)

# (n_embd, n_head) that cannot exist, and the exact message each must give.
BAD_COUNTS = [
    (0, 3, "Invalid attention configuration: n_embd=0; n_embd must be >= 1."),
    (12, 0, "Invalid attention configuration: n_head=0; n_head must be >= 1."),
    (-4, 2, "Invalid attention configuration: n_embd=-4; n_embd must be >= 1."),
    (12, -1, "Invalid attention configuration: n_head=-1; n_head must be >= 1."),
    (True, 1, "Invalid attention configuration: n_embd=True (bool); n_embd must be an int >= 1."),
    (12, True, "Invalid attention configuration: n_head=True (bool); n_head must be an int >= 1."),
    (12.0, 3,
     "Invalid attention configuration: n_embd=12.0 (float); n_embd must be an int >= 1."),
    (12, 3.0, "Invalid attention configuration: n_head=3.0 (float); n_head must be an int >= 1."),
    ("12", 3, "Invalid attention configuration: n_embd='12' (str); n_embd must be an int >= 1."),
]


@pytest.mark.parametrize(("n_embd", "n_head", "head_dim"), [(12, 3, 4), (32, 4, 8)])
def test_head_dim_of_the_lessons_numbers(n_embd: int, n_head: int, head_dim: int) -> None:
    got = AttentionConfig(n_embd, n_head).head_dim
    assert got == head_dim, (
        f"AttentionConfig({n_embd}, {n_head}).head_dim={got}, but should be {head_dim} "
        f"(C / H = {n_embd} / {n_head})"
    )


@pytest.mark.parametrize("n_embd", [1, 7, 12, 32, 48])
def test_head_dim_times_heads_is_the_width_for_every_divisor(n_embd: int) -> None:
    for n_head in attnspec.divisors(n_embd):
        config = AttentionConfig(n_embd, n_head)
        assert config.head_dim * n_head == n_embd, (
            f"AttentionConfig({n_embd}, {n_head}): head_dim={config.head_dim}, "
            f"but head_dim * n_head should be n_embd={n_embd}"
        )


@pytest.mark.parametrize(
    ("n", "expected"),
    [(10, [1, 2, 5, 10]), (12, [1, 2, 3, 4, 6, 12]), (7, [1, 7]), (1, [1])],
)
def test_divisors_are_the_head_counts_that_divide_the_width(n: int, expected: list[int]) -> None:
    got = attnspec.divisors(n)
    assert got == expected, f"divisors({n})={got}, but should be {expected}"


def test_config_defaults_to_biases() -> None:
    assert AttentionConfig(12, 3).bias is True, "AttentionConfig(12, 3).bias should default to True"


def test_config_cannot_be_changed_after_it_was_checked() -> None:
    config = AttentionConfig(12, 3)
    # A frozen config cannot be edited into an indivisible one behind the check's back.
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.n_head = 5  # type: ignore[misc]
    assert config.n_head == 3, f"n_head changed to {config.n_head} on a frozen config"


def test_indivisible_width_raises_divisibility_error_listing_valid_head_counts() -> None:
    with pytest.raises(DivisibilityError) as info:
        AttentionConfig(10, 3)
    assert str(info.value) == DIVISIBILITY_10_3, (
        f"AttentionConfig(10, 3) message was\n  {info.value}\nbut should be\n  {DIVISIBILITY_10_3}"
    )


def test_divisibility_error_is_a_value_error_and_a_config_error() -> None:
    with pytest.raises(DivisibilityError) as info:
        AttentionConfig(10, 3)
    for base in (ValueError, ConfigError, attnspec.AttnspecError):
        assert isinstance(info.value, base), (
            f"DivisibilityError from AttentionConfig(10, 3) should be a {base.__name__}; "
            f"its bases are {type(info.value).__mro__}"
        )


def test_indivisible_width_is_rejected_when_the_module_is_built() -> None:
    # No forward call: the error must come at construction, not as a later reshape error.
    with pytest.raises(DivisibilityError) as info:
        CausalSelfAttention(10, 3)
    assert str(info.value) == DIVISIBILITY_10_3, (
        f"CausalSelfAttention(10, 3) message was\n  {info.value}\nbut should be\n  "
        f"{DIVISIBILITY_10_3}"
    )


@pytest.mark.parametrize(("n_embd", "n_head"), [(4096, 3), (4097, 2), (10, 3), (7, 2)])
def test_divisibility_error_never_shows_a_whole_number_as_head_dim(
    n_embd: int, n_head: int
) -> None:
    with pytest.raises(DivisibilityError) as info:
        AttentionConfig(n_embd, n_head)
    shown = re.search(r"head_dim would be \d+/\d+ = (\S+), not a whole number", str(info.value))
    assert shown is not None, f"no 'head_dim would be C/H = ...' in the message: {info.value}"
    value = float(shown.group(1))
    # A message saying "4096/3 = 1365, not a whole number" contradicts itself.
    assert value != int(value), (
        f"AttentionConfig({n_embd}, {n_head}) shows head_dim as {shown.group(1)}, a whole "
        f"number, while {n_embd}/{n_head} = {n_embd / n_head}: {info.value}"
    )


@pytest.mark.parametrize(("n_embd", "n_head", "message"), BAD_COUNTS)
def test_impossible_counts_raise_config_error_with_the_reason(
    n_embd: object, n_head: object, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        AttentionConfig(n_embd, n_head)  # type: ignore[arg-type]
    assert str(info.value) == message, (
        f"AttentionConfig({n_embd!r}, {n_head!r}) message was\n  {info.value}\n"
        f"but should be\n  {message}"
    )
    assert not isinstance(info.value, DivisibilityError), (
        f"AttentionConfig({n_embd!r}, {n_head!r}) is not a divisibility problem, but raised "
        "DivisibilityError"
    )


@pytest.mark.parametrize(("n_embd", "n_head", "message"), BAD_COUNTS)
def test_impossible_counts_are_rejected_when_the_module_is_built(
    n_embd: object, n_head: object, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        CausalSelfAttention(n_embd, n_head)  # type: ignore[arg-type]
    assert str(info.value) == message, (
        f"CausalSelfAttention({n_embd!r}, {n_head!r}) message was\n  {info.value}\n"
        f"but should be\n  {message}"
    )
