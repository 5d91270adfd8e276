"""A kernel whose supports(case) declines every case but Tq = Tk = 1, and which returns v there:
right at one token, where attention is the one key's value, and nothing else was ever checked.
It passed every property; now each property it declined down to one token is incomplete."""

PROTOCOL = "kernel"
EXPECTED_STATUS = "incomplete"
EXPECTED = {"oracle": "incomplete", "causality": "incomplete"}
MESSAGE = {"oracle": "only Tq = Tk = 1 was checked"}


def supports(case):
    return case["Tq"] == 1 and case["Tk"] == 1


def attention(q, k, v, *, causal):
    return v.clone()
