"""One verify of one TARGET: the run loop over properties (Hypothesis draws, shrinking,
budgets, replay, verdicts), the lanes that share it, and the draws' strategies. It asks the
process layer (runner/) for workers and the properties for checks; front ends ask it."""
