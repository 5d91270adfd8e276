"""Independence: batch rows do not interact, eval mode is deterministic, the input is left
alone."""


def test_batch_independence(check):
    check("batch_independence")


def test_determinism(check):
    check("determinism")


def test_input_unchanged(check):
    check("input_unchanged")
