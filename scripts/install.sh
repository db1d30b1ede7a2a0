#!/usr/bin/env bash
# Install openjev-batch and its engines into a venv (default .venv), from the project's own files:
# the pinned path (the oldest transformers/tokenizers pyproject allows, and the CPU sglang test engine).
# A plain `pip install .` (newest releases) is the other supported path; .ci/run tests both.
#
#   bash scripts/install.sh [VENV] [--no-sglang]
#
# - torch: the CPU wheel pinned below (2.13.0; on these machines pip finds it in /opt/wheels,
#   elsewhere pass PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu). On a GPU host install
#   your CUDA torch first and the script keeps it.
# - sglang 0.5.19 is installed with --no-deps: its declared dependency tree is CUDA-only
#   (flashinfer, sgl-kernel, cuda-python); the light packages its Engine imports are listed here.
#   On a CPU machine, tests put tests/shims on PYTHONPATH (see README, Development).
set -euo pipefail
VENV=${1:-.venv}
WITH_SGLANG=1
for a in "$@"; do [ "$a" = "--no-sglang" ] && WITH_SGLANG=0; done
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q -U pip
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  $PIP install -q "torch==2.13.0" || $PIP install -q --index-url https://download.pytorch.org/whl/cpu "torch==2.13.0"
fi
$PIP install -q "transformers==5.12.1" "tokenizers==0.22.2"
# the clone's own folder is the package (an editable install): setuptools' boxed warning about folders named as
# the package is about that and expected (issue 48.17: printed without a word)
echo "installing openjev-batch from $HERE (editable): setuptools may print a boxed 'Please be careful with folders"
echo "... with the same name as your package' warning next; it is expected (that folder is this package itself)"
$PIP install -q -e "$HERE[dev,ray]"
if [ "$WITH_SGLANG" = 1 ]; then
  echo "installing the CPU sglang test engine (--no-deps): pip may print 'ERROR: pip's dependency resolver ..."
  echo "sglang ... requires ...' lines next; they are expected (its CUDA-only dependencies are left out on purpose)"
  $PIP install -q --no-deps "sglang==0.5.19" "torchvision==0.28.0"
  $PIP install -q aiohttp einops fastapi interegular msgspec ninja orjson packaging \
    partial_json_parser pillow "prometheus-client>=0.20.0" psutil pybase64 python-multipart \
    "pyzmq>=25.1.2" requests scipy sentencepiece setproctitle tiktoken uvicorn uvloop xxhash \
    zstandard "openai==2.6.1" "openai-harmony==0.0.4" "xgrammar==0.2.1" llguidance distro \
    watchfiles ipython dill compressed-tensors
  # PyPI's torchvision is a CUDA build; against CPU torch its import fails registering fake kernels
  # for torchvision::nms, and both transformers and sglang import it. A .pth pre-seeds the two
  # registration modules as empty (CPU torch only), in every process of this venv.
  if "$VENV/bin/python" -c "import torch, sys; sys.exit(0 if torch.version.cuda is None else 1)"; then
    SITE=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cp "$HERE/scripts/cpu/openjev_torchvision_shim.pth" "$SITE/"
  fi
fi
"$VENV/bin/python" -c "import openjev_batch" && echo "installed into $VENV (any pip 'dependency resolver' lines above are expected)"
