"""The process layer: the supervised worker and its zygote, the wire, isolation, the ranks."""

