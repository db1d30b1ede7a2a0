"""Test-only stand-in for `soundfile` (libsndfile bindings), which sglang's HTTP server imports at start-up for
its audio endpoints (`entrypoints/openai/audio_chunking.py`, sglang 0.5.19) and the CPU test install lacks. The
tests of `--connect` start that server on a CPU and send it no audio: any use says so."""


def __getattr__(name):
    raise ImportError(f"soundfile.{name}: the test shim has no audio support (tests/shims/soundfile.py)")
