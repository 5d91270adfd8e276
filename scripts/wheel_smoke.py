"""The built wheel as a user installs it: `nox -s wheel` or `python scripts/wheel_smoke.py`.

Builds the wheel, installs it into a fresh venv with only its declared dependencies (torch
pinned by constraints.txt) and pytest, then, in a temporary folder of the user's own with a
subject file `my_attention.py`, runs `attnspec verify` on a built-in and on that file, and the
pytest plugin on it; checks every exit code and that numpy is not importable there (attnspec
does not depend on it; the test extras pull it in, which hid its use on the wire once).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

SUBJECT = '''"""A user's attention: the reference, wrapped as their own module."""

from torch import Tensor, nn

from attnspec.subjects.reference import build as reference_build


class MyAttention(nn.Module):
    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        self.inner = reference_build(n_embd, n_head)

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x)


def build(n_embd: int, n_head: int) -> nn.Module:
    return MyAttention(n_embd, n_head)
'''


def run(*args: str | Path, cwd: Path | None = None, want: int = 0) -> str:
    """Run a command; its output, after checking its exit code is `want`."""
    started = time.monotonic()
    result = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                            check=False, env={k: v for k, v in os.environ.items()
                                              if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    print(f"$ {' '.join(map(str, args))}  -> exit {result.returncode} "
          f"({time.monotonic() - started:.1f} s)", flush=True)
    if result.returncode != want:
        sys.exit(f"wanted exit {want}, got {result.returncode}:\n{result.stdout[-3000:]}\n"
                 f"{result.stderr[-3000:]}")
    if "Failed to initialize NumPy" in result.stdout + result.stderr:  # numpy is optional
        sys.exit("torch's warning that numpy is absent reached the user:\n"
                 f"{result.stderr[-3000:]}")
    return result.stdout


def main() -> None:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attnspec-wheel-") as scratch:
        tmp = Path(scratch)
        dist, venv, user = tmp / "dist", tmp / "venv", tmp / "user"
        run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, ROOT)
        (wheel,) = dist.glob("attnspec-*.whl")
        run(sys.executable, "-m", "venv", venv)
        python, bindir = venv / "bin" / "python", venv / "bin"
        run(python, "-m", "pip", "install", "--quiet", "-c", ROOT / "constraints.txt", wheel,
            "pytest>=8")
        run(python, "-c", "import importlib.util, sys; "
            "sys.exit(importlib.util.find_spec('numpy') is not None)")  # numpy absent
        user.mkdir()
        (user / "my_attention.py").write_text(SUBJECT)
        quick = ("--max-examples", "3", "--seed", "1", "--no-database")
        run(bindir / "attnspec", "verify", "attnspec.subjects.reference", *quick, cwd=user)
        run(bindir / "attnspec", "verify", "my_attention.py", *quick, cwd=user)
        run(python, "-m", "pytest", "--attnspec-subject", "my_attention.py",
            "--attnspec-max-examples", "3", "--attnspec-seed", "1", "-q",
            "-p", "no:cacheprovider", cwd=user)
    print(f"wheel smoke test passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
