"""The shape trace: what each stage of the pipeline holds, with its axis labels."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SPEC_STAGES", "STAGES", "ShapeTrace", "Stage"]

# docs/design.md's stage table, in pipeline order: (name, axis labels).
STAGES: tuple[tuple[str, str], ...] = (
    ("input", "B T C"),
    ("projection", "B T C"),
    ("head split", "B H T D"),
    ("scores", "B H T T"),
    ("weights", "B H T T"),
    ("attend", "B H T D"),
    ("merge", "B T C"),
    ("output projection", "B T C"),
)

# Protocol v2's extra stages, between head split and scores (SpecAttention.traced).
SPEC_STAGES: tuple[tuple[str, str], ...] = (
    ("qk norm", "B T H*D"),
    ("kv heads", "B G T D"),
    ("rotary", "B H T D"),
    ("shared kv", "B H T D"),
)

_NOTES = {
    "input": "residual stream",
    "projection": "q, k, v each",
    "head split": "B T (H D) -> B H T D",
    "qk norm": "q and k normalised (RMSNorm or LayerNorm), before RoPE",
    "kv heads": "keys and values: B T (G D) -> B G T D",
    "rotary": "RoPE on queries and keys",
    "shared kv": "each kv head repeated for its H / G query heads",
    "scores": "q @ k^T / sqrt(D), causally masked",
    "weights": "softmax over keys",
    "attend": "weights @ v",
    "merge": "B H T D -> B T (H D)",
    "output projection": "back to residual width",
}


@dataclass(frozen=True)
class Stage:
    """One recorded stage: its name, its axis labels and the shape it held."""

    name: str
    labels: str
    shape: tuple[int, ...]
    note: str = ""


@dataclass
class ShapeTrace:
    """The shapes one forward pass held at every stage of docs/design.md's table.

    ```python
    out, trace = CausalSelfAttention(12, 3).traced(torch.randn(2, 5, 12))
    print(trace)  # a table: stage, axes, shape, what happened
    ```
    """

    n_embd: int
    n_head: int
    stages: list[Stage] = field(default_factory=list)
    spec: str | None = None  # a protocol v2 spec's description, for the header

    def record(self, name: str, shape: tuple[int, ...], note: str | None = None,
               labels: str | None = None) -> None:
        labels = dict(STAGES + SPEC_STAGES)[name] if labels is None else labels
        note = _NOTES[name] if note is None else note
        self.stages.append(Stage(name, labels, tuple(shape), note))

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape recorded at stage `name` (KeyError naming the stages recorded otherwise)."""
        for stage in self.stages:
            if stage.name == name:
                return stage.shape
        raise KeyError(f"No stage {name!r} in this trace; recorded: "
                       f"{', '.join(s.name for s in self.stages)}.")

    def table(self) -> str:
        """The trace as a plain-text table, shapes written as Python tuples."""
        head = (f"n_embd (C) = {self.n_embd}, n_head (H) = {self.n_head}, "
                f"head_dim (D) = C / H = {self.n_embd // self.n_head}") if self.spec is None \
            else f"spec: {self.spec}"
        rows = [("stage", "axes", "shape", "")]
        rows += [(s.name, s.labels, str(s.shape), s.note) for s in self.stages]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [head, ""]
        for r in rows:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        return "\n".join(line.rstrip() for line in lines)

    def __str__(self) -> str:
        return self.table()
