"""nox sessions. Every session installs with constraints.txt, so torch is the pinned CPU build."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["conformance"]

CONSTRAINTS = ("-c", "constraints.txt")


@nox.session
def conformance(session: nox.Session) -> None:
    """The conformance suite, conformance/ (the pytest plugin: the reference and every built-in
    subject, one test per property), or ATTNSPEC_SUBJECT / `-- --attnspec-subject TARGET`
    instead."""
    session.install(*CONSTRAINTS, "-e", ".[hf]", "pytest>=8")
    chosen = os.environ.get("ATTNSPEC_SUBJECT") or any(
        a.startswith("--attnspec-subject") for a in session.posargs)
    session.run("pytest", *([] if chosen else ["conformance"]), *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """attnspec's own tests (CI): the catalogue's smallest share, the CLI, the lab, mypy
    --strict (tests/test_examples_typing.py); two pytest workers, one per core."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("pytest", "tests", "-n", "2", "-m", "not process", "--durations=15",
                *session.posargs)


@nox.session
def processes(session: nox.Session) -> None:
    """The tests that start, stop and kill real processes (crashes, stop signals, lanes,
    zygotes, ranks, the hostile catalogue, the Triton kernels run in the interpreter): their
    own session, so that tests stays under 10 minutes on 2 cores; CI runs both."""
    session.install(*CONSTRAINTS, "-e", ".[test,triton]")
    session.run("pytest", "tests", "-n", "2", "-m", "process", "--durations=15",
                *session.posargs)


SGLANG_IMPORTS = ("orjson", "psutil", "pybase64", "requests", "packaging", "pillow",
                  "starlette", "msgspec", "pydantic", "pyzmq", "tqdm", "ipython", "aiohttp")


@nox.session
def triton(session: nox.Session) -> None:
    """Every Triton kernel of tests/kernels/triton/ verified (default profile; interpreted
    without a GPU), the table written to docs/triton.md; fails where one is not as expected
    (not in CI, which runs three of them in `processes`)."""
    session.install(*CONSTRAINTS, "-e", ".[triton]")
    # SGLang's Triton kernels without the rest of SGLang (its torch pin is not this torch):
    # the package alone, and what importing sglang.kernels.ops.attention needs.
    session.install("--no-deps", "sglang==0.5.23")
    session.install(*CONSTRAINTS, *SGLANG_IMPORTS)
    # vLLM's Triton attention likewise (its wheel pins another torch; these modules load no
    # compiled extension): the package alone and regex; the tutorial's file imports pytest.
    session.install("--no-deps", "vllm==0.34.0")
    session.install(*CONSTRAINTS, "regex", "pytest")
    session.run("python", "tests/kernels/triton/sweep.py", "--write", "docs/triton.md",
                *session.posargs)


@nox.session
def ray(session: nox.Session) -> None:
    """Many targets over Ray: a local cluster of two nodes (`ray start --head`, then `ray start
    --address`), a folder of 20 correct, broken and hostile targets verified with --engine ray,
    the second node killed partway; the JSONL must hold each target once, with the local
    engine's verdicts (scripts/ray_check.py; not in CI)."""
    session.install(*CONSTRAINTS, "-e", ".[ray,hf]")
    session.run("python", "scripts/ray_check.py", *session.posargs)


@nox.session
def catalogue(session: nox.Session) -> None:
    """Every broken and correct implementation on every property, and every compat subject
    (tests/compat/) whole, ci profile (not in CI)."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("pytest", "tests/test_catalogue.py", "tests/test_kernel_catalogue.py",
                "tests/test_compat.py", *session.posargs, env={"ATTNSPEC_CATALOGUE": "full"})


@nox.session
def distributed(session: nox.Session) -> None:
    """Sharded attention: tests/test_sharded.py, then tp_equivalence and cp_equivalence on the
    sharded built-ins, the good doubles and the sharded catalogue, over 2 and 4 ranks (not in
    CI, which runs tests/test_sharded.py and the catalogue at 2 ranks in `tests`)."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("pytest", "tests/test_sharded.py", "tests/test_sharding.py", *session.posargs)
    session.run("python", "scripts/sharded_check.py", *session.posargs)


@nox.session
def transformers(session: nox.Session) -> None:
    """The transformers conformance matrix: every model type attnspec.subjects.hf builds, on
    every backend, default profile; writes docs/transformers.md (not in CI, which runs a fixed
    share in tests/test_hf_adapter.py). `-- --types llama,gpt2 --backends eager` for a part."""
    session.install(*CONSTRAINTS, "-e", ".[hf]")
    session.run("python", "scripts/hf_matrix.py", *session.posargs)


@nox.session
def trace(session: nox.Session) -> None:
    """Print the lesson's shape trace: (2, 5, 12) -> (2, 3, 5, 4) -> (2, 5, 12)."""
    session.install(*CONSTRAINTS, "-e", ".")
    session.run("attnspec", "trace", "--n-embd", "12", "--n-head", "3", "--batch", "2",
                "--seq", "5", *session.posargs)


@nox.session
def lab(session: nox.Session) -> None:
    """Run the notebook lab, examples/lab.ipynb, top to bottom in a fresh kernel."""
    session.install(*CONSTRAINTS, "-e", ".[lab]", "pytest>=8")
    session.run("pytest", "tests/test_lab.py", *session.posargs)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the consumer examples."""
    session.install(*CONSTRAINTS, "-e", ".[test]")
    session.run("mypy", "--strict", "src", "examples", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff on everything."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks (not part of CI): benchmarks/results.md and .json. Try `-- --quick`."""
    session.install(*CONSTRAINTS, "-e", ".[hf]")
    session.run("python", "benchmarks/run.py", *session.posargs)


@nox.session
def soak(session: nox.Session) -> None:
    """No false alarms: every built-in subject and the batch-position-rounding double, every
    CPU default dtype, 4 seeds x 500 = 2,000 examples per property (not in CI).

    Reports go to docs/soak/; every run goes on even if one fails, then the table for
    docs/soak.md is printed and the session fails if any verdict was not pass or skip.
    """
    session.install(*CONSTRAINTS, "-e", ".[hf]")
    session.run("python", "scripts/soak.py", *session.posargs)
    session.run("python", "scripts/soak_table.py", "docs/soak")


@nox.session
def cuda(session: nox.Session) -> None:
    """CUDA conformance and benchmarks; skips without a GPU.

    With a GPU (at most 8 minutes: steps stop at a 450 s budget): verify on CUDA for every
    built-in subject, the sdpa subject under each SDPA backend, device_agreement and its
    witness, the kernel subjects (kernel_sdpa under each SDPA backend, kernel_sdpa_lower_right,
    kernel_flex, kernel_blockwise; float32, bfloat16, float16), forward timings; writes
    docs/cuda.md and docs/cuda.json; `-- --only kernels` runs the kernel steps alone. Without
    one it prints "no CUDA device: skipped". It uses the torch that constraints.txt installs,
    which may be a CPU build; on a GPU machine whose torch has CUDA, `python
    scripts/cuda_check.py` runs the same in that environment.
    """
    session.install(*CONSTRAINTS, "-e", ".[hf]", "pytest>=8")
    session.run("python", "scripts/cuda_check.py", *session.posargs)


@nox.session
def docs(session: nox.Session) -> None:
    """The docs site into site/ (CI): mkdocs --strict, so a warning, a broken link or anchor
    (mkdocs.yml `validation:`) or a property without its reference entry fails. Needs no
    torch: the property pages are read from the source (scripts/property_reference.py)."""
    if {"-q", "--quiet"} & set(session.posargs):
        session.error("nox -s docs: -q/--quiet was given, but mkdocs --quiet drops the warnings "
                      "before --strict counts them, so broken links would pass: leave it out")
    session.install("-r", "requirements-docs.txt")
    session.run("mkdocs", "build", "--strict", "--site-dir", "site", *session.posargs,
                env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session
def wheel(session: nox.Session) -> None:
    """The built wheel in a clean venv with only its declared dependencies (no numpy): verify
    and the pytest plugin on a user's own subject file (CI)."""
    session.run("python", "scripts/wheel_smoke.py", *session.posargs)
