"""W1 (256 rows × 8 questions, a ~1,000-token conversation per row) through the product against naive N+1,
one call and transformers batched (benchmarks/labels_gpu.py does the work).

    bash benchmarks/gpu.sh benchmarks/w1_gpu.py                        # Qwen3-0.6B shape, bf16 weights
    bash benchmarks/gpu.sh benchmarks/w1_gpu.py --shape qwen3-8b       # config only, load_format=dummy
    bash benchmarks/gpu.sh benchmarks/w1_gpu.py --variant g1d1 --variant g8d2 --variant g16d3   # pipeline shapes
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/w1_gpu.py --smoke       # CPU plumbing
"""

from labels_gpu import main

if __name__ == "__main__":
    main("w1", shapes=["qwen3-0.6b"], baselines=["naive", "one-call", "transformers"])
