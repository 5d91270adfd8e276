"""Build examples/lab.ipynb, the multi-head attention lab, without outputs.

Run `python examples/make_lab.py` after editing the cells below; tests/test_lab.py checks that
the stored notebook is what this script builds, then runs it top to bottom.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat

# nbformat's builders have no annotations; typing the module as Any keeps mypy --strict honest.
nbf: Any = nbformat
LAB = Path(__file__).with_name("lab.ipynb")

# (cell id, "md" or "code", source). Fixed ids keep the stored notebook byte-for-byte stable.
CELLS: list[tuple[str, str, str]] = [
    ("title", "md", """\
# Lab: multi-head attention, traced

**Goal.** Split the embedding channels into heads, run causal attention per head, recombine them,
and prove that the residual-stream shape `(B, T, C)` is preserved.

Axis letters, used everywhere below: `B` batch, `T` token positions, `C = n_embd` (the residual
width), `H = n_head`, `D = head_dim = C / H`.

You will:

1. trace the shape after every reshape boundary for `n_embd=12, n_head=3, (B, T) = (2, 5)`;
2. repeat it for every valid head count and check that `(B, T, C)` comes back;
3. try an invalid combination (`n_embd=10, n_head=3`) and see it fail early, with a reason;
4. look at every head's attention weights over the same positions;
5. answer the quick checks by computing them."""),
    ("imports", "code", """\
import tempfile
from pathlib import Path

import torch
from einops import rearrange
from IPython.display import Image, display

import attnspec
from attnspec import CausalSelfAttention, plot_heads"""),
    ("trace-md", "md", """\
## 1. Trace every reshape boundary

`CausalSelfAttention.traced(x)` runs one forward pass and records the shape at each stage:
projection, head split, scores, weights (softmax over keys), attend, merge, output projection."""),
    ("trace", "code", """\
n_embd, n_head = 12, 3
B, T = 2, 5
D = n_embd // n_head

# Seeded as attnspec's plot and trace seed them, so the picture below shows these very weights.
torch.manual_seed(0)
attn = CausalSelfAttention(n_embd, n_head).eval()
x = torch.randn(B, T, n_embd, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    y, trace = attn.traced(x)
print(trace)"""),
    ("trace-check-md", "md", """\
The same shapes, as assertions. Note what the head split does: `(2, 5, 12) -> (2, 3, 5, 4)`.
The five positions are still there, in every head; only the 12 channels were regrouped as
3 heads of 4."""),
    ("trace-check", "code", """\
expected = {
    "input": (B, T, n_embd),
    "projection": (B, T, n_embd),
    "head split": (B, n_head, T, D),
    "scores": (B, n_head, T, T),
    "weights": (B, n_head, T, T),
    "attend": (B, n_head, T, D),
    "merge": (B, T, n_embd),
    "output projection": (B, T, n_embd),
}
for stage, shape in expected.items():
    assert trace.shape(stage) == shape, f"{stage}: {trace.shape(stage)}, expected {shape}"
assert y.shape == x.shape == (B, T, n_embd)
print("every stage has the expected shape; output", tuple(y.shape), "== input", tuple(x.shape))"""),
    ("split-md", "md", """\
### The head split, by hand

The split is `view(B, T, H, D)` then `transpose(1, 2)`; einops says the same thing readably:
`"B T (H D) -> B H T D"`. A bare `view(B, H, T, D)` gives the *same shape* with the wrong
contents: it cuts the flat memory into heads, so a "head" mixes several positions. Label the axes
and check the contents, not only the shape."""),
    ("split", "code", """\
q = torch.arange(B * T * n_embd, dtype=torch.float32).view(B, T, n_embd)
right = q.view(B, T, n_head, D).transpose(1, 2)
assert torch.equal(right, rearrange(q, "B T (H D) -> B H T D", H=n_head))
# Head h at position t holds position t's channels h*D .. h*D + D - 1, for every h and t.
for h in range(n_head):
    for t in range(T):
        assert torch.equal(right[:, h, t], q[:, t, h * D:(h + 1) * D])

wrong = q.view(B, n_head, T, D)
print("shapes:", tuple(right.shape), tuple(wrong.shape), "| same contents:",
      torch.equal(right, wrong))
print("batch row 0, head 1, right (one row per position, that position's channels 0-3):")
print(right[0, 0])
print("batch row 0, head 1, bare view (row 2 is t1's channels 4-7, not position t2):")
print(wrong[0, 0])
assert not torch.equal(right, wrong)"""),
    ("divisors-md", "md", """\
## 2. Every valid head count

`n_head` must divide `n_embd`. For 12 that is 1, 2, 3, 4, 6 and 12. Whatever the head count,
the output comes back as `(B, T, C)`: heads change how the channels are grouped, not the width."""),
    ("divisors", "code", """\
print("head counts that divide n_embd=12:", attnspec.divisors(n_embd))
for h in attnspec.divisors(n_embd):
    module = CausalSelfAttention(n_embd, h).eval()
    with torch.no_grad():
        out, tr = module.traced(x)
    assert tr.shape("head split") == (B, h, T, n_embd // h)
    assert out.shape == (B, T, n_embd), (h, tuple(out.shape))
    print(f"n_head={h:2d}  head_dim={n_embd // h:2d}  head split {tr.shape('head split')!s:14}"
          f"  output {tuple(out.shape)}")"""),
    ("invalid-md", "md", """\
## 3. An invalid combination fails early

`n_embd=10, n_head=3` would need `head_dim = 10/3`. attnspec rejects it when the module is made,
with both numbers and the head counts that would work, instead of a reshape error deep inside
forward."""),
    ("invalid", "code", """\
try:
    CausalSelfAttention(10, 3)
except attnspec.DivisibilityError as error:
    caught = error
    print(f"{type(error).__name__}: {error}")
else:
    raise AssertionError("CausalSelfAttention(10, 3) should have been rejected")
assert "n_embd=10, n_head=3" in str(caught) and "1, 2, 5, 10" in str(caught)"""),
    ("late-md", "md", """\
Compare the error you would get without the early check, from the reshape itself: it names a
flat size, not the configuration that caused it."""),
    ("late", "code", """\
try:
    torch.randn(2, 5, 10).view(2, 5, 3, 10 // 3)
except RuntimeError as error:
    print(f"RuntimeError: {error}")"""),
    ("maps-md", "md", """\
## 4. Per-head attention maps

Every head gets its own `(T, T)` map over the **same** positions: rows are query positions,
columns key positions. Hatched cells are future keys, masked by the causal rule in every head.
The weights differ because each head has its own slice of the learned projections. (The same
picture comes from the command line: `attnspec plot --n-embd 12 --n-head 3 --seq 5`.)"""),
    ("maps", "code", """\
image = plot_heads(n_embd, n_head, seq=T, batch=B, batch_row=0, seed=0,
                   output=Path(tempfile.mkdtemp()) / "heads.png")
display(Image(filename=str(image)))"""),
    ("weights-md", "md", """\
The same numbers as a tensor, from the `attn` and `x` traced above (same seed as the picture):
one `(T, T)` map per head, zeros above the diagonal."""),
    ("weights", "code", """\
with torch.no_grad():
    w = attn.attention_weights(x)
print("attention weights:", tuple(w.shape), "= (B, H, T, T)")
print(w[0].round(decimals=2))"""),
    ("checks-md", "md", """\
## 5. Quick checks, computed

**1. For `n_embd=32` and `n_head=4`, what is `head_dim`?**"""),
    ("check-1", "code", """\
config = attnspec.AttentionConfig(n_embd=32, n_head=4)
print("head_dim =", config.head_dim)
assert config.head_dim == 32 // 4 == 8
with torch.no_grad():
    _, tr32 = CausalSelfAttention(32, 4).traced(torch.randn(B, T, 32))
assert tr32.shape("head split") == (B, 4, T, 8)
print("8: the 32 channels split evenly across 4 heads; head split", tr32.shape("head split"))"""),
    ("check-2-md", "md", """\
**2. Do different heads receive different token sequences?** No: every head's weights are a
`(T, T)` map over the same T positions, each query spreads weight 1 over the same keys
`t1..t_i`, and no head sees the future."""),
    ("check-2", "code", """\
for h in range(n_head):
    w_h = w[:, h]
    assert w_h.shape == (B, T, T)
    assert torch.all(w_h.triu(diagonal=1) == 0), f"head {h + 1} sees a future position"
    assert torch.allclose(w_h.sum(dim=-1), torch.ones(B, T))
print(f"all {n_head} heads: weights {tuple(w[:, 0].shape)} per batch row, over positions "
      f"t1..t{T}, causal, rows summing to 1")"""),
    ("check-3-md", "md", """\
**3. What shape does the recombined output return to?** `(B, T, n_embd)`: merging transposes
`(B, H, T, D)` back to `(B, T, H, D)` and concatenates the heads into `H * D = C` channels."""),
    ("check-3", "code", """\
assert trace.shape("attend") == (B, n_head, T, D)
assert trace.shape("merge") == (B, T, n_head * D) == (B, T, n_embd)
assert y.shape == (B, T, n_embd)
print("recombined:", trace.shape("attend"), "->", trace.shape("merge"), "->", tuple(y.shape))"""),
    ("takeaways", "md", """\
## Explain it back

More heads is not more sequence length: `T` is the same in every head; heads partition the
feature channels (`C = H * D`). The invariant to test before running attention is
`n_embd % n_head == 0`.

**Key takeaways**

- Heads partition feature capacity, not token positions.
- Each head keeps the causal rule.
- `head_dim` must divide the embedding width in the simple implementation.
- Recombination returns to the residual-stream shape `(B, T, C)`."""),
]


def build() -> Any:
    """The lab notebook, as an nbformat v4 notebook with no outputs."""
    cells = [
        nbf.v4.new_markdown_cell(source, id=cell_id) if kind == "md"
        else nbf.v4.new_code_cell(source, id=cell_id)
        for cell_id, kind, source in CELLS
    ]
    return nbf.v4.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python"},
        },
    )


def main() -> None:
    nb = build()
    nbf.validate(nb)
    nbf.write(nb, LAB)
    print(f"wrote {LAB}")


if __name__ == "__main__":
    main()
