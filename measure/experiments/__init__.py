"""Experiments (not tests, not part of the installed package): one module per experiment, each
with its own flags. Run one from a checkout with `python -m autotune.measure.experiments NAME [flags]`;
results and the commands that made them are in RESULTS.md beside this file."""
