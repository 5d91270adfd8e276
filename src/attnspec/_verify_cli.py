"""`attnspec verify`: placeholder until the engine lands."""

from __future__ import annotations

import argparse
from typing import Any


def add_verify_parser(sub: Any) -> None:
    verify = sub.add_parser("verify", help="check an implementation against the properties")
    verify.add_argument("target", metavar="TARGET")


def run_verify(args: argparse.Namespace) -> int:
    raise NotImplementedError("verify")
