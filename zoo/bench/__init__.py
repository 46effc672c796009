"""Benchmark suites, their statistics and their report."""
