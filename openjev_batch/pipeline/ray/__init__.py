"""`--ray`: the job on Ray Data (run.py). Ray is imported only when it runs."""
