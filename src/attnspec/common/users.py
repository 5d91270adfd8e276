"""The account a root runner starts its workers under (`worker_user`), checked where the
option is given, before any process starts."""

from __future__ import annotations

import os
import pwd
import sys
from dataclasses import dataclass

__all__ = ["WorkerUser", "resolve_worker_user"]


@dataclass(frozen=True)
class WorkerUser:
    """The account a root runner starts its workers under (`worker_user`)."""

    name: str
    uid: int
    gid: int
    home: str


def resolve_worker_user(name: str) -> WorkerUser:
    """The account `name` (or a numeric uid); ValueError saying why it cannot be used."""
    if not sys.platform.startswith("linux") and not sys.platform.startswith("darwin"):
        raise ValueError("running the worker as another user needs a POSIX system.")
    try:
        entry = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError):
        raise ValueError(f"there is no user {name!r} on this machine.") from None
    if os.geteuid() != 0:
        raise ValueError(f"only root can start processes as another user, and this runner is "
                         f"uid {os.geteuid()}; run as root, or leave the option out.")
    if entry.pw_uid == 0:
        raise ValueError(f"{name!r} is root (uid 0): the worker would be no more separate than "
                         "without the option; name an unprivileged user such as nobody.")
    return WorkerUser(name=entry.pw_name, uid=entry.pw_uid, gid=entry.pw_gid,
                      home=entry.pw_dir)
