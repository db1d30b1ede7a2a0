"""W2 (MMLU-style: 12,032 single 10-option questions, a 5-shot block shared per category, 14 categories)
through the product against naive N+1 (benchmarks/labels_gpu.py does the work).

    bash benchmarks/gpu.sh benchmarks/w2_gpu.py
    PYTHONPATH=tests/shims SGLANG_USE_CPU_ENGINE=1 python benchmarks/w2_gpu.py --smoke       # CPU plumbing
"""

from labels_gpu import main

if __name__ == "__main__":
    main("w2", shapes=["qwen3-0.6b"], baselines=["naive"])
