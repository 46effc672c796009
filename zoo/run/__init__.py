"""Runs: train, resume and load run directories; launch a pipeline's processes; the run directory's files and the
observers that write them."""
