"""The scheduler patches, one module each: `gather` (the label-logprob gather without a GPU sync,
sgl-project/sglang#39642), `readback` (multi-item label logprobs copied to the host without blocking), `idle-check`
(the idle radix-tree check rate-limited), `alloc` (the state-slot mapping written without blocking). Each installs
only where sglang has the structure it replaces. scheduler_patch.py chooses and installs them in sglang's scheduler
process; they are imported there, so they stay light (torch only, lazily)."""
