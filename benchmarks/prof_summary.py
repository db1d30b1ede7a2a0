"""Summarise a py-spy raw (collapsed-stack) profile from the benchmarks' `common.profiled` blocks: samples per process,
and per process the functions with the most inclusive samples under a given root frame.

usage: python benchmarks/prof_summary.py FILE.prof.gz [ROOT_SUBSTRING] [N]
"""

from __future__ import annotations

import collections
import gzip
import sys


def frame_name(f: str) -> str:
    name, _, loc = f.partition(" (")
    file = loc.split(":")[0].rsplit("/", 1)[-1]
    return f"{name} [{file}]"


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) > 1 else 2)
    path = sys.argv[1]
    root = sys.argv[2] if len(sys.argv) > 2 else ""
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    procs: collections.Counter = collections.Counter()
    incl: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    with gzip.open(path, "rt") as fh:
        for line in fh:
            stack, _, n = line.rstrip().rpartition(" ")
            frames = stack.split(";")
            proc = frames[0][:70]
            procs[proc] += int(n)
            names = [frame_name(f) for f in frames[1:]]
            if root:
                hits = [i for i, x in enumerate(names) if root in x]
                if not hits:
                    continue
                names = names[hits[0] :]
            for x in dict.fromkeys(names):
                incl[proc][x] += int(n)
    for proc, total in procs.most_common():
        print(f"== {proc}: {total} samples")
        for name, n in incl[proc].most_common(top):
            print(f"  {n:6d} {100 * n / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
