"""W3 (the nightly ticket job: 20,000 ~300-token tickets × 3 questions) through the product against naive
N+1 (benchmarks/labels_gpu.py does the work). On the 35B-A3B hybrid MoE shape (`--shape qwen3.5-35b-a3b`,
config only, load_format=dummy) the variants of docs/benchmarks.md run 5 are `default`, `first-branch`,
`fp8` and `g8d3` (three request steps in flight); that shape has no naive baseline here (`--no-baselines`).

    bash benchmarks/gpu.sh benchmarks/w3_gpu.py
    bash benchmarks/gpu.sh benchmarks/w3_gpu.py --shape qwen3.5-35b-a3b --no-baselines --variant default --variant first-branch
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/w3_gpu.py --smoke       # CPU plumbing
"""

from labels_gpu import main

if __name__ == "__main__":
    main("w3", shapes=["qwen3-0.6b"], baselines=["naive"])
