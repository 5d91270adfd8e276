"""Causality: no output depends on a later position, in values or in gradients."""


def test_causality(check):
    check("causality")


def test_prefix(check):
    check("prefix")


def test_grad_causality(check):
    check("grad_causality")
