"""openjev-batch: offline batch classification read from next-token label logprobs."""

__version__ = "0.1.0"
