"""`--ray`: the one loop's chunks scored on Ray Data (runner.py: the runner; cluster.py: joining a cluster and
the plan of the actor pools; stages.py: the actors; staging.py: staged results for an interrupted run).
Ray is imported only when a job runs."""

from .cluster import RayOptions
from .runner import RayRunner, RaySummary

__all__ = ["RayOptions", "RayRunner", "RaySummary"]
