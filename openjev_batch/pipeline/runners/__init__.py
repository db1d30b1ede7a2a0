"""Runners: what scores a job's chunks for the one loop (pipeline/loop.py). A runner is opened for one job
(`open(cfg, readout)`: its backend started or configured) and turns the chunks the loop gives it, (index,
rows) for the chunks still to do, into (index, records, info) — `info`: the chunk's numbers that are not in
its records (warm-up and planned unique tokens). `labels` are a started backend's (classifier-head), `name`
names the backend in errors, `describe()` gives the Summary's model, pattern and start-up.

- `local.LocalRunner`: one backend in this process, the host stage of chunk k+1 under chunk k.
- `ray.RayRunner`: engine actors on a Ray cluster, chunks handed back as their buckets return (in any
  order); its staged rows are its own crash safety within a chunk. A runner's `summary_type` (default
  `Summary`) takes what `describe()` adds (the Ray runner's workers, buckets, rows it scored).
"""
