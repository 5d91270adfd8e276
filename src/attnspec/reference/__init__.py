"""The math: the kernel-level core and the module references around it, typed and traced."""
