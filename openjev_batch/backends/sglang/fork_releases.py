"""Which sglang releases the Qwen3.5/3.6 state fork (backends/sglang/hybrid) serves, and the one line that says so
(`--dry-run`, the run summary). Pure facts: no sglang import."""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

# sglang releases the Qwen3.5/3.6 fork (backends/sglang/hybrid) serves. It calls sglang internals; each name and
# signature it touches is checked when the override loads (hybrid/check.py, which refuses a release that moved one),
# and was read in every release below (issue 38: the release tool, now `scripts/check_sglang_release.py`, on each
# wheel's source: all fit; the MIS engine settings (radix cache and chunked prefill off, flashinfer's per-item
# positions) and the in-place default of the GDN extend kernel are the same). Exactness was measured on a GPU on
# 0.5.17 only (benchmarks/hybrid_mis_exact_gpu.py); the others are load-checked. The package's `sglang` extra
# installs 0.5.18-0.5.23.
FORK_SGLANG = ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")
FORK_GPU_VERIFIED = ("0.5.17",)


def fork_note(sglang_version: str | None) -> str:
    """One line on how far the fork is verified on this sglang release (run summary, --dry-run)."""
    if sglang_version in FORK_GPU_VERIFIED:
        return f"sglang {sglang_version}: exactness measured on a GPU"
    note = (
        f"sglang {sglang_version}: the fork's sglang names are load-checked; exactness is measured on a GPU on "
        f"{', '.join(FORK_GPU_VERIFIED)} only"
    )
    if sglang_version and at_least(sglang_version, "0.5.20"):
        # 0.5.20+ `GDNAttnBackend.init_forward_metadata` builds its own multi-item metadata (PR #33922), which
        # the fork does not use: host work per forward, not a different answer
        note += "; this release also builds sglang's own (unused) GDN multi-item plan every forward"
    return note


def fork_release(sglang_version: str | None) -> str:
    """One line for a Qwen3.5/3.6 hybrid on sglang (`needs_fork`), shown by `--dry-run` and the run summary beside
    the request pattern: the installed sglang release, whether the exact multi-item fork serves it
    (`FORK_SGLANG`, which the package's `sglang` extra and the README name too) and how far that is verified
    (`fork_note`). `sglang_version` None: sglang is not installed."""
    served = f"{FORK_SGLANG[0]}-{FORK_SGLANG[-1]}"
    if sglang_version is None:
        return f"sglang not installed; the exact hybrid multi-item fork serves sglang {served}"
    if sglang_version not in FORK_SGLANG:
        return (
            f"sglang {sglang_version} installed: the exact hybrid multi-item fork serves sglang {served}, not this "
            "release (prefix-first runs instead)"
        )
    verified = fork_note(sglang_version).split(": ", 1)[1]
    return f"sglang {sglang_version} installed: the exact hybrid multi-item fork serves it ({served}); {verified}"


def at_least(release: str, floor: str) -> bool:
    """Whether sglang `release` is `floor` or later, by packaging.version: `0.5.17rc1` comes before 0.5.17 (a
    hand-written parser read it as 0.5.17), and a string that names no release (a server may say anything) is
    not later."""
    try:
        return Version(release) >= Version(floor)
    except InvalidVersion:
        return False
