#!/usr/bin/env bash
# Here (no GPU): repack ../shared/gpu's sglang 0.5.17 wheelhouse (two 32 MiB chunks, two device calls) as one
# installed tree compressed with xz (~36 MB), so one device call carries it with the repo, the Qwen3 tokenizer
# and py-spy. Writes the git-ignored .gpu/: site.tar.xz, tok/, whl/. benchmarks/gpu.sh unpacks it to /tmp/site.
# `pack_kit.sh --ray` also packs Ray 2.60 into .gpuray/ for benchmarks/ray_gpu.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=${KIT:-../shared/gpu}
W=$(mktemp -d)
cat "$KIT/part_00" "$KIT/part_01" > "$W/wheelhouse.tar"
want=$(awk '$2 == "wheelhouse.tar" {print $1}' "$KIT/SHA256SUMS")
[ "$(sha256sum "$W/wheelhouse.tar" | cut -d' ' -f1)" = "$want" ] || { echo "kit sha256 mismatch" >&2; exit 1; }
tar -xf "$W/wheelhouse.tar" -C "$W"
plat=""; for p in 34 28 27 26 24 17 5; do plat="$plat --platform manylinux_2_${p}_x86_64"; done
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" $plat --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 --python-version 3.12 --implementation cp --only-binary=:all: "$W"/wheelhouse/*.whl
mkdir -p .gpu/tok .gpu/whl
tar -C "$W" -cf - site | xz -9 -T0 > .gpu/site.tar.xz
T=${OPENJEV_CACHE:-$HOME/.cache/openjev-batch}/models/qwen3-tokenizer
# a fresh machine has not fetched it yet (found 2026-12-02: the kit went without it and the GPU call failed)
[ -f "$T/tokenizer.json" ] || ${PYTHON:-.venv/bin/python} -m openjev_batch models fetch qwen3-tokenizer >/dev/null
cp "$T/tokenizer_config.json" .gpu/tok/ && gzip -9c "$T/tokenizer.json" > .gpu/tok/tokenizer.json.gz
python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d .gpu/whl py-spy==0.4.3
rm -rf "$W"; du -sh .gpu
if [ "${1:-}" = "--ray" ]; then  # Ray 2.60 for benchmarks/ray_gpu.sh → .gpuray/raysite.tar.xz (~27 MB)
  R=$(mktemp -d); mkdir -p .gpuray
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d "$R/w" ray==2.60.0 jsonschema==4.26.0 \
    referencing==0.37.0 jsonschema-specifications==2025.9.1 rpds-py==2026.9.1
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$R/raysite" --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --python-version 3.12 --implementation cp --only-binary=:all: "$R"/w/*.whl
  rm -rf "$R"/raysite/ray/{jars,rllib,serve,llm}  # Java, RL, Serve and ray.llm: unused by ray.data actors
  tar -C "$R" -cf - raysite | xz -9 -T0 > .gpuray/raysite.tar.xz; rm -rf "$R"; du -sh .gpuray
fi
