"""Devices: CPU and CUDA agree (skips without a CUDA device)."""


def test_device_agreement(check):
    check("device_agreement")
