"""Error classes. They carry no logic: messages are built where the error is raised."""

from __future__ import annotations


class AttnspecError(Exception):
    """Base class of every error attnspec raises on purpose."""


class ConfigError(AttnspecError, ValueError):
    """An attention configuration that cannot exist (n_embd or n_head below 1, not an int)."""


class DivisibilityError(ConfigError):
    """n_embd is not divisible by n_head, so head_dim = n_embd / n_head is not a whole number."""


class ShapeError(AttnspecError, TypeError):
    """A tensor whose shape or dtype breaks its annotation (raised by the runtime checks)."""


class TargetError(AttnspecError):
    """A TARGET that cannot be loaded as a subject (`attnspec verify` exits 2)."""


class UsageError(AttnspecError):
    """A command or API call misused: bad option values, unknown property ids.

    `option` names the parameter as `verify()` spells it, `value` is what was given and
    `reason` why it cannot be; the message says it in those terms (`max_seq=0: must be ...`),
    and the command line and the pytest plugin say it with their own flags.
    """

    def __init__(self, message: str = "", *, option: str | None = None, value: object = None,
                 reason: str = "") -> None:
        super().__init__(f"{option}={value!r}: {reason}" if option is not None else message)
        self.option, self.value, self.reason = option, value, reason
