"""The benchmark figures: one module each, run as `python -m bench.figures.<name>`."""
