"""The front ends: the command line, the Python API, plots, the pytest plugin."""
