"""`attnspec plot` / `plot_heads`: a panel per head, the causal mask marked, clear misuse errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnspec import ALiBi, AttentionSpec, ConfigError, DivisibilityError, SpecAttention, UsageError
from attnspec.frontends.cli import main
from attnspec.frontends.plot import INSTALL_HINT, _figure, hidden_keys, plot_heads

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _heatmaps(fig: object) -> list[object]:
    # The head panels are the axes that hold an image; the colour bar and empty slots do not.
    return [ax for ax in fig.axes if ax.images]  # type: ignore[attr-defined]


def test_plot_heads_writes_a_png_and_returns_its_path(tmp_path: Path) -> None:
    out = plot_heads(12, 3, seq=4, output=tmp_path / "heads.png")
    assert out == tmp_path / "heads.png"
    assert out.read_bytes()[:8] == PNG_MAGIC, f"{out} is not a PNG file"


def test_one_panel_per_head_each_over_the_same_t_positions() -> None:
    fig = _figure(12, 3, seq=4)
    panels = _heatmaps(fig)
    assert len(panels) == 3, f"{len(panels)} panels for n_head=3, but should be one per head"
    for h, ax in enumerate(panels):
        assert ax.get_title() == f"head {h + 1} of 3\nchannels {4 * h}\u2013{4 * h + 3} (D = 4)"
        assert ax.get_xlabel() == "key position"
        assert ax.get_ylabel() == "query position"
        assert ax.images[0].get_array().shape == (4, 4)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["t=0", "t=1", "t=2", "t=3"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["t=0", "t=1", "t=2", "t=3"]


def test_eight_heads_wrap_into_two_rows_of_four() -> None:
    fig = _figure(16, 8, seq=2)
    panels = _heatmaps(fig)
    assert len(panels) == 8
    columns = {round(ax.get_position().x0, 3) for ax in panels}
    rows = {round(ax.get_position().y0, 3) for ax in panels}
    assert (len(rows), len(columns)) == (2, 4), f"8 heads drawn as {len(rows)}x{len(columns)}"


def test_figure_title_names_the_configuration_and_seed() -> None:
    title = _figure(12, 3, seq=4, seed=7)._suptitle.get_text()
    for part in ("n_embd (C) = 12", "n_head (H) = 3", "head_dim (D) = 4", "T = 4", "seed = 7"):
        assert part in title, f"{part!r} missing from the title {title!r}"


def test_future_cells_are_masked_and_hatched_not_just_low() -> None:
    T = 5
    for ax in _heatmaps(_figure(12, 3, seq=T)):
        data = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
        future = np.triu(np.ones((T, T), dtype=bool), k=1)
        # Masked cells carry no colour-mapped value at all, so they cannot pass for a low weight.
        assert np.isnan(data[future]).all() and not np.isnan(data[~future]).any()
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 1, "the future cells should be one hatched region per panel"
        outline = hatched[0].get_path()
        # Shrink each cell to its centre: inside the region exactly when the key is in the future.
        inside = np.array([[outline.contains_point((j, i)) for j in range(T)] for i in range(T)])
        assert (inside == future).all(), f"hatched cells:\n{inside}\nfuture cells:\n{future}"


def test_weights_are_written_in_the_allowed_cells_when_t_is_small() -> None:
    T = 4
    for ax in _heatmaps(_figure(12, 3, seq=T)):
        cells = {(round(t.get_position()[1]), round(t.get_position()[0])): float(t.get_text())
                 for t in ax.texts}
        assert set(cells) == {(i, j) for i in range(T) for j in range(i + 1)}
        for i in range(T):
            row = sum(cells[i, j] for j in range(i + 1))
            assert row == pytest.approx(1.0, abs=0.01 * (i + 1)), f"row t{i + 1} sums to {row}"


def test_no_weights_are_written_beyond_eight_positions() -> None:
    assert all(len(ax.texts) == 0 for ax in _heatmaps(_figure(12, 3, seq=9)))


def test_same_seed_draws_the_same_weights_and_another_seed_does_not() -> None:
    def weights(seed: int) -> list[np.ndarray]:
        return [np.ma.filled(ax.images[0].get_array(), -1.0) for ax in
                _heatmaps(_figure(12, 3, seq=4, batch=2, batch_row=1, seed=seed))]

    first, again, other = weights(3), weights(3), weights(4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other, strict=True))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_row": 1}, ValueError,
         "plot_heads(n_embd=12, n_head=3, seq=4, batch=1): batch_row=1 is out of range; "
         "with batch B=1 it must be an int from 0 to 0."),
        ({"batch": 3, "batch_row": -1}, ValueError,
         "plot_heads(n_embd=12, n_head=3, seq=4, batch=3): batch_row=-1 is out of range; "
         "with batch B=3 it must be an int from 0 to 2."),
        ({"seq": 0}, ValueError,
         "plot_heads(n_embd=12, n_head=3, seq=0, batch=1): seq=0; seq must be an int >= 1."),
        ({"n_head": 0}, ConfigError,
         "Invalid attention configuration: n_head=0; n_head must be >= 1."),
        ({"n_embd": 10}, DivisibilityError,
         "Invalid attention configuration (n_embd=10, n_head=3): n_embd must be divisible by "
         "n_head, but head_dim would be 10/3 = 3.333, not a whole number. Head counts that "
         "divide n_embd=10: 1, 2, 5, 10."),
    ],
)
def test_bad_arguments_raise_with_the_value_and_the_valid_range(
    tmp_path: Path, kwargs: dict[str, int], error: type[Exception], message: str
) -> None:
    args = {"n_embd": 12, "n_head": 3} | kwargs
    n_embd, n_head = args.pop("n_embd"), args.pop("n_head")
    with pytest.raises(error) as caught:
        plot_heads(n_embd, n_head, output=tmp_path / "heads.png", **args)
    assert str(caught.value) == message
    assert not (tmp_path / "heads.png").exists()


def test_missing_output_folder_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="the folder .*nowhere' does not exist"):
        plot_heads(12, 3, output=tmp_path / "nowhere" / "heads.png")


def test_cli_plot_writes_the_file_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "heads.png"
    code = main(["plot", "--n-embd", "12", "--n-head", "3", "--seq", "4", "--output", str(out)])
    assert code == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert out.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-row", "2"], "attnspec plot: error: plot_heads(n_embd=12, n_head=3, seq=4, "
         "batch=1): batch_row=2 is out of range; with batch B=1 it must be an int from 0 to 0."),
        (["--n-embd", "10", "--n-head", "3"], "attnspec plot: error: Invalid attention "
         "configuration (n_embd=10, n_head=3): n_embd must be divisible by n_head, but head_dim "
         "would be 10/3 = 3.333, not a whole number. Head counts that divide n_embd=10: "
         "1, 2, 5, 10."),
    ],
)
def test_cli_misuse_exits_2_with_one_line_and_no_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code = main(["plot", *argv, "--output", str(tmp_path / "heads.png")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == message + "\n"
    assert captured.out == ""


def test_missing_matplotlib_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # None in sys.modules makes `import matplotlib` fail as if it were not installed.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(UsageError) as caught:
        plot_heads(12, 3, output=tmp_path / "heads.png")
    assert str(caught.value) == INSTALL_HINT
    assert "pip install 'attnspec[plot]'" in INSTALL_HINT

    assert main(["plot", "--output", str(tmp_path / "heads.png")]) == 2
    assert capsys.readouterr().err == f"attnspec plot: error: {INSTALL_HINT}\n"
    assert not (tmp_path / "heads.png").exists()


def test_importing_the_plot_module_does_not_import_matplotlib() -> None:
    probe = ("import sys, attnspec.frontends.plot, attnspec.frontends.cli; "
             "print('matplotlib' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "False", \
        "attnspec.frontends.plot imported matplotlib at import time"


# Specs: the window hatched like the future, each panel's kv head and ALiBi slope named.


def test_hidden_keys_are_the_future_and_the_keys_outside_the_window() -> None:
    x, o = True, False  # x: hidden, o: seen
    expected = [[o, x, x, x, x],
                [o, o, x, x, x],
                [x, o, o, x, x],
                [x, x, o, o, x],
                [x, x, x, o, o]]
    assert hidden_keys(5, 2).tolist() == expected, f"window 2:\n{hidden_keys(5, 2)}"
    future = np.triu(np.ones((5, 5), dtype=bool), k=1)
    assert (hidden_keys(5).numpy() == future).all(), "no window: only the future is hidden"
    assert (hidden_keys(5, 5).numpy() == future).all(), "a window of T keys hides nothing more"


def test_window_cells_are_masked_and_hatched_exactly() -> None:
    T, W = 6, 3
    fig = _figure(spec=AttentionSpec(n_embd=16, n_head=4, window=W), seq=T)
    hidden = hidden_keys(T, W).numpy()
    for ax in _heatmaps(fig):
        data = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)
        assert (np.isnan(data) == hidden).all(), f"NaN cells:\n{np.isnan(data)}\nnot\n{hidden}"
        hatched = [p.get_path() for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 2, "one hatched region for the future, one outside the window"
        inside = np.array([[any(p.contains_point((j, i)) for p in hatched) for j in range(T)]
                           for i in range(T)])
        assert (inside == hidden).all(), f"hatched cells:\n{inside}\nhidden cells:\n{hidden}"
        written = {(round(t.get_position()[1]), round(t.get_position()[0])) for t in ax.texts}
        assert written == {(i, j) for i in range(T) for j in range(T) if not hidden[i, j]}
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[1] == "key outside the window of 3 keys (key <= query - 3): masked, weight 0"


def test_a_window_of_at_least_t_keys_hatches_only_the_future() -> None:
    fig = _figure(spec=AttentionSpec(n_embd=16, n_head=4, window=4), seq=4)
    for ax in _heatmaps(fig):
        assert len([p for p in ax.patches if p.get_hatch()]) == 1
    assert len(fig.legends[0].get_texts()) == 1, "no cell is outside the window, so no key"


@pytest.mark.parametrize(("n_kv_head", "reads"), [(2, [1, 1, 2, 2]), (1, [1, 1, 1, 1])])
def test_each_panel_names_the_kv_head_its_query_head_reads(
    n_kv_head: int, reads: list[int]
) -> None:
    spec = AttentionSpec(n_embd=16, n_head=4, n_kv_head=n_kv_head)
    fig = _figure(spec=spec, seq=2)
    titles = [ax.get_title() for ax in _heatmaps(fig)]
    expected = [f"head {h + 1} of 4\nchannels {4 * h}\u2013{4 * h + 3} (D = 4)\n"
                f"reads kv head {g} of {n_kv_head}" for h, g in enumerate(reads)]
    assert titles == expected, f"titles {titles}, not {expected}"
    assert f"spec: {spec.describe()}\n" in fig._suptitle.get_text()


def test_alibi_panels_name_their_slope_and_plain_heads_name_no_kv_head() -> None:
    fig = _figure(spec=AttentionSpec(n_embd=16, n_head=4, head_dim=2, positions=ALiBi()), seq=2)
    titles = [ax.get_title().splitlines() for ax in _heatmaps(fig)]
    # H = 4: slopes 2^-2, 2^-4, 2^-6, 2^-8; G = H, so no kv head line.
    assert [t[1:] for t in titles] == [
        ["channels 0\u20131 (D = 2)", "ALiBi slope 0.25"],
        ["channels 2\u20133 (D = 2)", "ALiBi slope 0.0625"],
        ["channels 4\u20135 (D = 2)", "ALiBi slope 0.01562"],
        ["channels 6\u20137 (D = 2)", "ALiBi slope 0.003906"]], titles


def test_with_sinks_the_title_says_rows_sum_to_less_than_one() -> None:
    title = _figure(spec=AttentionSpec(n_embd=16, n_head=4, sinks=True), seq=3)._suptitle
    assert "each row sums to 1 less its head's sink share." in title.get_text()
    plain = _figure(spec=AttentionSpec(n_embd=16, n_head=4), seq=3)._suptitle.get_text()
    assert plain.endswith("each row sums to 1.")


def test_spec_weights_come_from_spec_attention_seeded_like_trace() -> None:
    spec = AttentionSpec(n_embd=16, n_head=4, n_kv_head=2, window=2, positions=ALiBi())
    fig = _figure(spec=spec, seq=5, batch=2, batch_row=1, seed=5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        attn = SpecAttention(spec)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = attn.attention_weights(x)[1].numpy()
    drawn = np.stack([np.ma.filled(ax.images[0].get_array(), 0.0) for ax in _heatmaps(fig)])
    assert np.allclose(drawn, expected, atol=1e-6), "the panels are not the spec's weights"


def test_plot_heads_rejects_a_spec_that_contradicts_n_head(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        plot_heads(12, 4, spec=AttentionSpec(n_embd=12, n_head=3), output=tmp_path / "h.png")
    assert str(caught.value) == (
        "plot_heads(n_embd=12, n_head=4, spec=AttentionSpec(n_embd=12, n_head=3)): n_head=4 "
        "disagrees with the spec's n_head=3. Give the spec alone (it carries n_embd and "
        "n_head), or values that match it.")
    assert not (tmp_path / "h.png").exists()


def test_cli_plot_with_spec_options_writes_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "heads.png"
    code = main(["plot", "--n-embd", "16", "--n-head", "4", "--kv-heads", "2", "--window", "2",
                 "--alibi", "--seq", "3", "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_cli_plot_impossible_spec_exits_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["plot", "--head-dim", "0", "--output", str(tmp_path / "heads.png")])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.err == ("attnspec plot: error: Invalid attention configuration: head_dim=0; "
                            "head_dim must be >= 1.\n")
    assert captured.out == ""
    assert not (tmp_path / "heads.png").exists()
