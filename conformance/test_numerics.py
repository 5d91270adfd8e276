"""Numerics: finite outputs, and agreement with the reference in values and gradients."""


def test_finite(check):
    check("finite")


def test_oracle(check):
    check("oracle")


def test_oracle_grad(check):
    check("oracle_grad")
