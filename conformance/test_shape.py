"""Shape contract: the residual width comes back, dtype and device are kept, and impossible
configurations are refused at construction."""


def test_width(check):
    check("width")


def test_dtype(check):
    check("dtype")


def test_divisibility(check):
    check("divisibility")
