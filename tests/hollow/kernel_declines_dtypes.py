"""A correct kernel (SDPA) whose supports(case) declines every dtype but float32 instead of
declaring DTYPES: three dtypes were asked and one was checked, so its passes are incomplete."""

import torch
import torch.nn.functional as F

PROTOCOL = "kernel"
EXPECTED_STATUS = "incomplete"
EXPECTED = {"oracle": "incomplete"}
MESSAGE = {"oracle": "only float32 of bfloat16, float32, float64 was checked"}


def supports(case):
    return case["dtype"] == "float32"


def attention(q, k, v, *, causal):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


_ = torch
