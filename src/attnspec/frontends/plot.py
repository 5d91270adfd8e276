"""`attnspec plot`: every head's causal attention weights, side by side, for any spec.

matplotlib is an optional extra (`pip install 'attnspec[plot]'`), imported only when a figure
is drawn, so `import attnspec` never pulls it in.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._errors import UsageError
from ..reference.module import CausalSelfAttention
from ..reference.spec import ALiBi, AttentionSpec
from ..reference.variants import SpecAttention, visible
from .api import resolve_spec, seeded, spec_call

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_heads"]

# Weights are written in the cells up to this many positions; beyond it they are unreadable.
MAX_LABELLED_T = 8
# Panels per row before the heads wrap onto another row.
MAX_COLUMNS = 6
MASKED_COLOUR = "#d9d9d9"
MASKED_HATCH_COLOUR = "#8c8c8c"
# Keys outside a sliding window: hatched grey like the future, slanted the other way.
WINDOW_HATCH = "\\\\\\"
CMAP = "viridis"
INSTALL_HINT = (
    "attnspec plot needs matplotlib, which is not installed. "
    "Install it with: pip install 'attnspec[plot]'  (or: pip install matplotlib)"
)


def _import_matplotlib() -> Any:
    try:
        # The parent first: a cached submodule must not hide a missing (or blocked) matplotlib.
        import matplotlib
        import matplotlib.figure  # noqa: F401
    except ImportError as error:
        raise UsageError(INSTALL_HINT) from error
    return matplotlib


def _check_counts(where: str, **values: object) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {name}={value!r}; {name} must be an int >= 1.")


def _weights(
    n_embd: int | None, n_head: int | None, *, spec: AttentionSpec | None = None, seq: int,
    batch: int, batch_row: int, seed: int
) -> tuple[AttentionSpec | None, torch.Tensor]:
    """The spec drawn (None: plain (C, H) attention) and the softmax weights (H, T, T) of batch
    row `batch_row`, from seeded weights and input."""
    resolved = resolve_spec("plot_heads", n_embd, n_head, spec)
    where = (f"plot_heads(n_embd={n_embd!r}, n_head={n_head!r}, seq={seq!r}, batch={batch!r})"
             if resolved is None
             else f"plot_heads(spec={spec_call(resolved)}, seq={seq!r}, batch={batch!r})")
    _check_counts(where, seq=seq, batch=batch)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"{where}: seed={seed!r}; seed must be an int.")
    if isinstance(batch_row, bool) or not isinstance(batch_row, int) or not (
        0 <= batch_row < batch
    ):
        raise ValueError(
            f"{where}: batch_row={batch_row!r} is out of range; with batch B={batch} it must be "
            f"an int from 0 to {batch - 1}."
        )
    # Same seeding as attnspec.trace: one seed gives the same module, input and picture.
    attn: CausalSelfAttention | SpecAttention
    if resolved is None:
        assert n_embd is not None and n_head is not None  # resolve_spec checked them
        C, H = n_embd, n_head
        attn, x = seeded(lambda: CausalSelfAttention(C, H).eval(), batch=batch, seq=seq,
                         n_embd=C, seed=seed)
    else:
        attn, x = seeded(lambda: SpecAttention(resolved).eval(), batch=batch, seq=seq,
                         n_embd=resolved.n_embd, seed=seed)
    with torch.no_grad():
        weights = attn.attention_weights(x)
    return resolved, weights[batch_row]


def hidden_keys(T: int, window: int | None = None) -> torch.Tensor:
    """(T, T) bool, True where query i may not see key j: the future (j > i) and, with a
    window, keys j <= i - window. These are the cells the head maps hatch."""
    return ~visible(T, window, torch.device("cpu"))


def _masked_outline(T: int) -> list[tuple[float, float]]:
    """The staircase polygon (x = key, y = query) around every future cell, key > query."""
    verts = [(0.5, -0.5), (T - 0.5, -0.5), (T - 0.5, T - 1.5)]
    for i in range(T - 2, -1, -1):
        verts += [(i + 0.5, i + 0.5), (i + 0.5, i - 0.5)]
    return verts


def _window_outline(T: int, window: int) -> list[tuple[float, float]]:
    """The staircase polygon (x = key, y = query) around every cell outside the window,
    key <= query - window (rows window .. T-1); call it only when window < T."""
    verts = [(-0.5, window - 0.5)]
    for i in range(window, T):
        verts += [(i - window + 0.5, i - 0.5), (i - window + 0.5, i + 0.5)]
    return verts + [(-0.5, T - 0.5)]


def _panel_title(h: int, spec: AttentionSpec | None, n_head: int, D: int) -> str:
    """Head h's title: its channels, and under a spec the kv head it reads and its ALiBi slope."""
    lines = [f"head {h + 1} of {n_head}", f"channels {h * D}\u2013{(h + 1) * D - 1} (D = {D})"]
    if spec is not None and spec.G != spec.n_head:
        # Query head h reads kv head h // (H / G); numbered from 1 like the heads.
        lines.append(f"reads kv head {h // (spec.n_head // spec.G) + 1} of {spec.G}")
    if spec is not None and isinstance(spec.positions, ALiBi):
        lines.append(f"ALiBi slope {spec.positions.slopes_for(spec.n_head)[h]:.4g}")
    return "\n".join(lines)


def _ticks(T: int) -> list[int]:
    # Every position while they fit, else about a dozen evenly spaced ones (always the last).
    step = 1 if T <= 16 else math.ceil(T / 12)
    ticks = list(range(0, T, step))
    if ticks[-1] != T - 1:
        # The last position replaces a tick too close to it, so their labels never collide.
        if T - 1 - ticks[-1] < step / 2:
            ticks.pop()
        ticks.append(T - 1)
    return ticks


def _figure(
    n_embd: int | None = None, n_head: int | None = None, *, spec: AttentionSpec | None = None,
    seq: int = 4, batch: int = 1, batch_row: int = 0, seed: int = 0
) -> Figure:
    """Build (not save) the figure `plot_heads` writes: one panel per head, plus a colour bar."""
    spec, weights = _weights(n_embd, n_head, spec=spec, seq=seq, batch=batch,
                             batch_row=batch_row, seed=seed)
    _import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    T = seq
    H = weights.size(0)
    if spec is None:
        assert n_embd is not None  # _weights checked it
        D = n_embd // H
    else:
        D = spec.D
    # A window of T keys or more hides nothing the causal rule does not, so none is drawn.
    window = spec.window if spec is not None and spec.window is not None and spec.window < T \
        else None
    hidden = hidden_keys(T, window)
    rows = math.ceil(H / MAX_COLUMNS)
    # Balanced rows: 8 heads are drawn 4 + 4, not 6 + 2.
    cols = math.ceil(H / rows)
    panel = min(max(1.6 + 0.45 * T, 3.0), 6.0)
    # About a third of a cell's height in points, so "0.00" fits inside its cell.
    fontsize = min(11.0, 0.3 * 72 * 0.85 * panel / T)
    if spec is None:
        suptitle = (
            f"Causal attention weights, one panel per head\n"
            f"n_embd (C) = {n_embd}, n_head (H) = {H}, head_dim (D) = {D}, T = {T}, "
            f"seed = {seed}, batch row {batch_row} of B = {batch}\n"
            f"Every head sees the same T positions; each row sums to 1."
        )
    else:
        seen = ("Every head sees the same T positions" if window is None else
                f"Query i sees the keys i - {window} < j <= i, at most {window}")
        suptitle = (
            f"Causal attention weights, one panel per query head\n"
            f"spec: {spec.describe()}\n"
            f"head_dim (D) = {D}, kv heads (G) = {spec.G}, T = {T}, seed = {seed}, "
            f"batch row {batch_row} of B = {batch}\n"
            f"{seen}; "
            + ("each row sums to 1 less its head's sink share." if spec.sinks
               else "each row sums to 1.")
        )
    # Extra title lines (the spec; kv head, ALiBi slope) take height from panels; give it back.
    extra = 0 if spec is None else (spec.G != H) + isinstance(spec.positions, ALiBi)
    # Wide enough for the title lines even with a single head (about 0.1 inch a character).
    width = max(panel * cols + 1.4, 8.5, 0.1 * max(map(len, suptitle.splitlines())))

    fig = Figure(figsize=(width, panel * rows + 1.9 + 0.25 * (extra * rows + (spec is not None))),
                 layout="constrained")
    # Agg draws off screen, so no display is needed and the caller's backend is untouched.
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharex=True, sharey=True)
    image = None
    for h in range(rows * cols):
        ax = axes[h // cols][h % cols]
        if h >= H:
            ax.set_axis_off()
            continue
        image = _panel(ax, weights[h], hidden, window, fontsize,
                       title=_panel_title(h, spec, H, D))
    fig.suptitle(suptitle, fontsize=12)
    if image is not None:
        bar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, pad=0.02)
        bar.set_label("attention weight (softmax over keys)")
    keys = [Patch(facecolor=MASKED_COLOUR, edgecolor=MASKED_HATCH_COLOUR, hatch="///",
                  label="future key (key > query): masked by the causal rule, weight 0")]
    if window is not None:
        keys.append(Patch(facecolor=MASKED_COLOUR, edgecolor=MASKED_HATCH_COLOUR,
                          hatch=WINDOW_HATCH,
                          label=f"key outside the window of {window} keys "
                                f"(key <= query - {window}): masked, weight 0"))
    fig.legend(handles=keys, loc="outside lower center", frameon=False, fontsize=10)
    return fig


def _panel(ax: Any, w: Tensor, hidden: Tensor, window: int | None, fontsize: float, *,
           title: str) -> Any:
    """One head's panel: its (T, T) weights, the masked keys hatched, the values written in
    the cells where they fit; the image, for the colour bar."""
    T = w.size(0)
    from matplotlib.patches import Polygon

    shown = w.masked_fill(hidden, float("nan")).numpy()
    image = ax.imshow(shown, cmap=CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
    if T > 1:
        # Future keys are hatched grey, not just dark: they are masked, not merely unlikely.
        ax.add_patch(Polygon(_masked_outline(T), closed=True, facecolor=MASKED_COLOUR,
                             edgecolor=MASKED_HATCH_COLOUR, hatch="///", linewidth=0.0,
                             label="masked"))
    if window is not None:
        # Hatched the other way: masked as firmly as the future, for another reason.
        ax.add_patch(Polygon(_window_outline(T, window), closed=True,
                             facecolor=MASKED_COLOUR, edgecolor=MASKED_HATCH_COLOUR,
                             hatch=WINDOW_HATCH, linewidth=0.0, label="outside the window"))
    if T <= MAX_LABELLED_T:
        for i in range(T):
            for j in range(i + 1):
                if hidden[i, j]:
                    continue
                value = float(w[i, j])
                # Dark text on the bright end of viridis, white on the dark end.
                colour = "black" if value > 0.6 else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", color=colour,
                        fontsize=fontsize)
    ticks = _ticks(T)
    names = [f"t={t}" for t in ticks]  # 0-based, as in messages and indices
    ax.set_xticks(ticks, names)
    ax.set_yticks(ticks, names)
    ax.tick_params(labelbottom=True, labelleft=True, length=0)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(title, fontsize=11)
    # Thin white grid lines between cells keep neighbouring weights apart.
    ax.set_xticks([t - 0.5 for t in range(1, T)], minor=True)
    ax.set_yticks([t - 0.5 for t in range(1, T)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1.0 if T <= 32 else 0.0)
    ax.tick_params(which="minor", length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    return image


def plot_heads(
    n_embd: int | None = None,
    n_head: int | None = None,
    *,
    spec: AttentionSpec | None = None,
    seq: int = 4,
    batch: int = 1,
    batch_row: int = 0,
    seed: int = 0,
    output: str | Path = "heads.png",
) -> Path:
    """Draw every head's causal attention weights side by side and write the image.

    One panel per head over the same T positions: rows are query positions, columns key
    positions, future (masked) cells hatched grey, weights written in the cells when T <= 8.
    With a spec, keys outside its window are hatched too, and each panel names the kv head its
    query head reads (GQA, MQA) and its ALiBi slope.

    ```python
    attnspec.frontends.plot.plot_heads(12, 3, seq=4, output="heads.png")  # the lesson's picture
    attnspec.plot_heads(spec=attnspec.AttentionSpec(n_embd=16, n_head=4, n_kv_head=2, window=3),
                        seq=6, output="window.png")
    ```

    **Arguments:**

    - `n_embd`, `n_head`: C and H, validated first (`ConfigError`, `DivisibilityError`), for
      `CausalSelfAttention`.
    - `spec`: an `AttentionSpec`, drawn with `SpecAttention` instead; n_embd and n_head may then
      be left out, and must match the spec if given (`UsageError`).
    - `seq`: T, token positions (>= 1). `batch`: B (>= 1); `batch_row`: which row, 0..B-1.
    - `seed`: seeds the module's weights and the input, so a seed always gives the same picture.
    - `output`: the file; its suffix picks the format (png, svg, pdf).

    **Returns:** the path written. Raises `UsageError` with the install command when matplotlib
    is missing.
    """
    path = Path(output)
    if not path.parent.is_dir():
        raise UsageError(f"plot_heads(output={str(output)!r}): the folder {str(path.parent)!r} "
                         f"does not exist.")
    fig = _figure(n_embd, n_head, spec=spec, seq=seq, batch=batch, batch_row=batch_row,
                  seed=seed)
    fig.savefig(path, dpi=150)
    return path
