"""errors.out_of_memory: which failures the CLI says as "out of memory" in one line."""

import errno
import resource
import subprocess
import sys

from openjev_batch.errors import out_of_memory


def test_memory_errors_and_their_library_texts_are_out_of_memory():
    assert out_of_memory(MemoryError())
    assert out_of_memory(OSError(errno.ENOMEM, "Cannot allocate memory"))
    assert out_of_memory(ImportError("libtorch_cpu.so: failed to map segment from shared object"))
    assert not out_of_memory(OSError(errno.ENOENT, "No such file or directory"))
    assert not out_of_memory(ValueError("not a valid safetensors file"))


def test_a_system_error_is_out_of_memory_only_under_an_address_space_limit():
    """CI's plain install (transformers 5.25) imported transformers under `prlimit --as=300M` into
    `SystemError: error return without exception set` (a C allocation failing without a MemoryError), and the
    user got a traceback. Under a limit that is memory; without one it is a bug to show as it is."""
    code = "from openjev_batch.errors import out_of_memory as o; print(o(SystemError('error return without exception set')))"

    def limit(n=8 << 30):
        resource.setrlimit(resource.RLIMIT_AS, (n, n))

    limited = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit, timeout=60)
    assert limited.stdout.strip() == "True", limited.stderr
    if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
        assert not out_of_memory(SystemError("error return without exception set"))
