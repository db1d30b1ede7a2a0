"""Benchmark data builders, fixtures and committed results for `openjev-batch eval` (see evals/README.md).

The evaluation code itself is `openjev_batch/evaluation/`, inside the installed package, so that the
`openjev-batch eval` entry point works from any directory; this folder holds what is repo-only.
"""
