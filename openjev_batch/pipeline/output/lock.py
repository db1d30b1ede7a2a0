"""The output's lock, `<out>.lock`: one job writes an output at a time (store.OutputStore takes it first).

flock(2) on the file, so a job that dies (SIGKILL included) never leaves it stuck: the kernel drops the lock
with the process, and the next job takes the file over when it holds the record this module writes (pid,
host, start time). The file is created with O_EXCL semantics, already locked and holding its record, and an
existing one is opened with O_NOFOLLOW: a symlink there, or a user's own file named `<out>.lock`, is refused
and left as it is, never written through, truncated or deleted (hostile trial, issue 25). flock works on
local filesystems and on NFSv4 (Linux emulates it with POSIX locks there).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import time
import uuid
from pathlib import Path

from ...errors import ConfigError, OutputBusyError


def _holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {info['pid']} on host {info['host']}, started {info['started']}"
    except Exception:  # a holder that has not written its record yet
        return "another process"


def lock_path(output: Path) -> Path:
    return output.with_name(output.name + ".lock")


def _record() -> bytes:
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    }
    return json.dumps(info).encode()


def _is_record(data: bytes) -> bool:
    """Whether `data` is a lock record this store writes (`_record`): what tells a stale lock of a job that
    died, which may be taken over, from a user's own file named `<out>.lock`, which is never touched."""
    try:
        d = json.loads(data)
    except ValueError:
        return False
    return isinstance(d, dict) and {"pid", "host", "started"} <= d.keys()


def _open_lock(lock: Path) -> int | None:
    """The existing `<out>.lock`, opened without following a symlink (None when there is none). Raises
    ConfigError for a symlink or anything but a regular file: the lock's record would be written through
    it into the file it points to (hostile trial, issue 25)."""
    try:
        fd = os.open(lock, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        raise ConfigError(
            f"{lock} is a symbolic link; remove it (the lock is never written through a link)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ConfigError(f"{lock} is not a regular file; move it away")
    return fd


def _create_lock(lock: Path) -> int | None:
    """Create `<out>.lock` holding this job's record, already flock-held: written under a unique temporary
    name and hard-linked into place, so no other job ever sees it empty or unlocked, and an existing file
    (a lock, a user's, a symlink) is never replaced. None when a file appeared there first. Filesystems
    without hard links get O_CREAT|O_EXCL|O_NOFOLLOW instead."""
    tmp = lock.with_name(f".{lock.name}-{uuid.uuid4().hex[:8]}.tmp")
    excl = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, excl, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new inode: nobody else can hold it
        os.pwrite(fd, _record(), 0)
        try:
            os.link(tmp, lock)
        except FileExistsError:
            os.close(fd)
            return None
        except OSError:  # no hard links here (some FUSE / SMB mounts)
            os.close(fd)
            try:
                fd = os.open(lock, excl, 0o644)
            except FileExistsError:
                return None
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.pwrite(fd, _record(), 0)
        return fd
    except BaseException:
        os.close(fd)
        raise
    finally:
        tmp.unlink(missing_ok=True)


def acquire(output: Path) -> int:
    """An exclusive non-blocking flock on `<out>.lock`; returns the fd that holds it. Raises OutputBusyError
    naming the holder, ConfigError for a lock file this store did not write (a symlink, a user's file).
    A lock left by a job that died (its flock dropped by the kernel) is taken over. A job that finished
    removes the lock file while holding it, so a lock taken on a file that has just been unlinked is dropped
    and taken again on the new file."""
    lock = lock_path(output)
    for _ in range(100):
        fd = _open_lock(lock)
        if fd is None:
            if (fd := _create_lock(lock)) is None:
                continue  # another job created it first: open theirs
            return fd
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(output, lock, fd) from None
        if not same_file(lock, fd):
            os.close(fd)
            continue
        if not _is_record(os.pread(fd, 4096, 0)):
            os.close(fd)
            raise ConfigError(
                f"{lock} exists and is not a lock of openjev-batch; move it away, or write to another -o "
                "(it is left as it is)"
            )
        os.ftruncate(fd, 0)  # the record of a job that died: this job's lock now
        os.pwrite(fd, _record(), 0)
        return fd
    raise OutputBusyError(f"{output}: could not lock {lock} (it keeps being removed)")


def same_file(path: Path, fd: int) -> bool:
    """Whether `path` (not followed) is still the file `fd` has open."""
    try:
        return os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


def _busy(output: Path, lock: Path, fd: int) -> OutputBusyError:
    """The error naming the job that holds `fd`'s lock (closes `fd`)."""
    who = _holder(fd)
    os.close(fd)
    return OutputBusyError(
        f"another job is writing {output} ({who}; it holds {lock}); wait for it to finish, or write to another -o"
    )


def refuse_if_held(output: Path) -> None:
    """Raise OutputBusyError when a job holds `<out>.lock` now, ConfigError for a lock file that is a
    symlink; creates and writes nothing. For a caller that writes beside the output before the job takes
    the lock: eval's questions.jsonl (hostile trial, issue 25: a second eval, refused at the lock, had
    already rewritten the running one's questions)."""
    lock = lock_path(output)
    if (fd := _open_lock(lock)) is None:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(output, lock, fd) from None
    os.close(fd)  # free: dropped again, the job takes it for itself
