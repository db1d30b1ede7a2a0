"""openjev-batch: offline batch classification read from next-token label logprobs.

Python API (imported lazily, so `import openjev_batch` stays light): `Classifier` (a model kept open across
calls: `with Classifier(model, backend="hf") as clf: out = clf.run(df, questions)`) and `run` (one shot).
"""

from ._version import __version__

__all__ = ["Classifier", "run", "__version__"]


def __getattr__(name: str):
    if name in ("Classifier", "run"):
        from . import api  # lazy: keeps `import openjev_batch` light (api loads pyarrow, pydantic)

        return getattr(api, name)
    raise AttributeError(f"module 'openjev_batch' has no attribute {name!r}")
