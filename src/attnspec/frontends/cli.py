"""The `attnspec` command line: verify, trace, plot."""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from .._errors import AttnspecError, UsageError
from ..common.report import printable
from .verify_cli import EXIT_OK, EXIT_USAGE, _SafeStream, add_verify_parser, flush_quietly

if TYPE_CHECKING:
    from ..reference.spec import AttentionSpec


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse exits 2 on misuse too; keep its one-line form and our exit code.
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def _add_spec_options(command: argparse.ArgumentParser) -> None:
    """The options that make --n-embd and --n-head an AttentionSpec (SpecAttention)."""
    spec = command.add_argument_group(
        "attention spec", "any of these draws SpecAttention for the spec they describe, "
        "instead of plain multi-head attention")
    spec.add_argument("--kv-heads", type=int, metavar="G",
                      help="G, the key/value heads (n_kv_head); must divide H (default: H)")
    spec.add_argument("--head-dim", type=int, metavar="D",
                      help="D, the channels of one head (default: C / H)")
    spec.add_argument("--window", type=int, metavar="W",
                      help="sliding window: query i sees keys i - W < j <= i (default: none)")
    positions = spec.add_mutually_exclusive_group()
    positions.add_argument("--rope", action="store_const", dest="positions", const="rope",
                           help="RoPE, rotating halves (GPT-NeoX, Llama), theta 10000")
    positions.add_argument("--rope-interleaved", action="store_const", dest="positions",
                           const="rope-interleaved",
                           help="RoPE, rotating channel pairs (0, 1), (2, 3), ... (GPT-J)")
    positions.add_argument("--alibi", action="store_const", dest="positions", const="alibi",
                           help="ALiBi: head h adds -slope_h * (i - j) to its scores")


SPEC_FLAGS = "--kv-heads, --head-dim, --window, --rope, --rope-interleaved, --alibi"


def _spec_of(args: argparse.Namespace) -> AttentionSpec | None:
    """The spec the options describe; None when none was given (plain multi-head attention)."""
    from ..reference.spec import ALiBi, AttentionSpec, RoPE

    if args.kv_heads is None and args.head_dim is None and args.window is None \
            and args.positions is None:
        return None
    positions = {None: None, "rope": RoPE(), "rope-interleaved": RoPE(interleaved=True),
                 "alibi": ALiBi()}[args.positions]
    # AttentionSpec validates: an impossible spec is a ConfigError, which exits 2 with it.
    return AttentionSpec(n_embd=args.n_embd, n_head=args.n_head, n_kv_head=args.kv_heads,
                         head_dim=args.head_dim, window=args.window, positions=positions)


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="attnspec", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    trace = sub.add_parser("trace", help="print the shape at every stage of the reference")
    trace.add_argument("--n-embd", type=int, default=12, help="C, the residual width (12)")
    trace.add_argument("--n-head", type=int, default=3, help="H, the number of heads (3)")
    trace.add_argument("--batch", type=_positive, default=2, help="B (2)")
    trace.add_argument("--seq", type=_positive, default=5, help="T, token positions (5)")
    trace.add_argument("--kernel", choices=("explicit", "sdpa"), default="explicit")
    _add_spec_options(trace)

    add_verify_parser(sub)

    plot = sub.add_parser("plot", help="draw every head's attention weights side by side; "
                          "with TARGET --only P --replay JSON, a failure's picture (SVG)")
    plot.add_argument("target", nargs="?", metavar="TARGET",
                      help="a failure's subject: replay its example and draw where it fails")
    plot.add_argument("--only", metavar="PROPERTY", help="the failing property (with TARGET)")
    plot.add_argument("--replay", metavar="JSON", help="the example, as the replay command "
                      "gives it (with TARGET)")
    plot.add_argument("--timeout", type=float, default=30.0, help="seconds per request (30)")
    plot.add_argument("--n-embd", type=int, default=12, help="C (12)")
    plot.add_argument("--n-head", type=int, default=3, help="H (3)")
    plot.add_argument("--seq", type=_positive, default=4, help="T (4)")
    plot.add_argument("--batch-row", type=int, default=0, help="which batch row to draw (0)")
    plot.add_argument("--batch", type=_positive, default=1, help="B (1)")
    plot.add_argument("--seed", type=int, default=0, help="seed for weights and input (0)")
    plot.add_argument("--output", "-o", default="heads.png", help="the image file (heads.png)")
    _add_spec_options(plot)
    return parser


def _trace(args: argparse.Namespace) -> int:
    from .api import trace

    spec = _spec_of(args)
    if spec is not None and args.kernel != "explicit":
        raise UsageError(f"--kernel {args.kernel}: the spec options ({SPEC_FLAGS}) trace "
                         "SpecAttention, which has the explicit math only; drop one or the "
                         "other.")
    print(trace(args.n_embd, args.n_head, spec=spec, batch=args.batch, seq=args.seq,
                kernel=args.kernel), file=_SafeStream(sys.stdout))
    return EXIT_OK


def _plot_replay(args: argparse.Namespace) -> int:
    """`attnspec plot TARGET --only P --replay JSON -o FILE.svg`: a failure's picture."""
    from ..common.options import RunOptions
    from ..properties.pictures import PICTURED
    from ..session.engine import Session
    from .html_report import _json_safe, render_svg
    from .verify_cli import _replay_object

    if not args.only or not args.replay:
        raise UsageError(f"attnspec plot {args.target}: a failure's picture needs --only "
                         "PROPERTY and --replay JSON, as its replay command gives them.")
    if args.only not in PICTURED:
        raise UsageError(f"attnspec plot --only {args.only}: no picture for this property; "
                         f"pictures are drawn for {', '.join(PICTURED)}.")
    output = "failure.svg" if args.output == "heads.png" else args.output
    if not output.endswith(".svg"):
        raise UsageError(f"attnspec plot --output {output!r}: a failure's picture is SVG; "
                         "give a name ending in .svg.")
    example = _replay_object(args.replay)
    options = RunOptions(device=str(example.get("device", "cpu")),
                         dtypes=(str(example.get("dtype", "float32")),),
                         timeout=args.timeout, database=False)
    with Session(args.target, options) as session:
        data = _json_safe(session.picture(args.only, example))
    if "error" in data:
        raise UsageError(f"attnspec plot {args.target} --only {args.only}: {data['error']}")
    with open(output, "w", encoding="utf-8") as handle:
        handle.write(render_svg(data) + "\n")
    print(f"wrote {output}: {data['failing']} failing cells; {data['caption']}",
          file=_SafeStream(sys.stdout))
    return EXIT_OK


def _plot(args: argparse.Namespace) -> int:
    from .plot import plot_heads

    if args.target is not None:
        return _plot_replay(args)

    path = plot_heads(args.n_embd, args.n_head, spec=_spec_of(args), seq=args.seq,
                      batch=args.batch, batch_row=args.batch_row, seed=args.seed,
                      output=args.output)
    print(f"wrote {path}", file=_SafeStream(sys.stdout))
    return EXIT_OK


def _fill_closed_std_fds() -> None:
    """Open /dev/null on a closed fd 0, 1 or 2 (`2>&-`), so that no file opened later (a
    report, a pipe to the worker) lands there and receives what is written to stderr."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, os.O_RDWR)  # the lowest free fd: `fd` itself
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 a property failed, 2 misuse)."""
    _fill_closed_std_fds()
    try:
        return _main(argv)
    finally:
        # A closed pipe (`| head`) must not turn into a traceback or "Exception ignored" at exit.
        flush_quietly(sys.stdout, sys.stderr)


def entry() -> NoReturn:
    """The `attnspec` command (and `python -m attnspec`): main(), then a quick exit.

    With torch loaded, the interpreter's own teardown takes about 1.3 s on 2 cores and does
    nothing a finished run needs: the report is written and the worker is stopped. So exit
    handlers run, the streams are flushed, and the process ends without it.
    """
    code = main()
    atexit._run_exitfuncs()
    flush_quietly(sys.stdout, sys.stderr)
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from .. import __version__

        print(f"attnspec {__version__}", file=_SafeStream(sys.stdout))
        return EXIT_OK
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        if args.command == "trace":
            return _trace(args)
        if args.command == "plot":
            return _plot(args)
        from .many_cli import is_many, run_many
        from .verify_cli import run_verify

        return run_many(args) if is_many(args) else run_verify(args)
    except (AttnspecError, ValueError) as error:
        # Misuse and bad configurations: the message alone, no traceback.
        from .verify_cli import FLAGS, in_flags

        print(f"attnspec {args.command}: error: {printable(in_flags(error, FLAGS))}",
              file=_SafeStream(sys.stderr))
        return EXIT_USAGE


if __name__ == "__main__":
    entry()
