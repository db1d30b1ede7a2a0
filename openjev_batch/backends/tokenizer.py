"""The model's tokenizer, tokenizing as its `tokenizer.json` says whatever the installed transformers.

Why a check: transformers picks a tokenizer class from tokenizer_config.json and the model type, and some
classes rebuild the pipeline from the vocabulary with their own pre-tokenizer instead of the file's. A Qwen3.5
or Qwen3.6 checkpoint names `Qwen2Tokenizer`, which transformers 5.12-5.17 load with Qwen2's split regex
(no `\\p{M}`): Hindi, Thai, Bengali and other scripts with combining marks then split into other tokens
than the checkpoint's own (`नमस्ते दुनिया`: 10 tokens instead of 6; issue 34.2). So at load the class
transformers chose is compared, on probe strings, with the `tokenizers` library reading the same file; a
mismatch is corrected by loading the file as it is (`PreTrainedTokenizerFast`), and refused if that does
not agree either. `tokenizer_name` says which class tokenizes (the run summary and the output's manifest).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BackendError

# Scripts with combining marks (Devanagari, Thai, Bengali, Tamil), accents composed and decomposed (the
# normalizer), CJK, an emoji with a skin-tone modifier, digits, contractions and whitespace runs (the split).
PROBES = (
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "হ্যালো বিশ্ব",
    "வணக்கம் உலகம்",
    "naïve café, nai\u0308ve cafe\u0301",
    "日本語のテキストと中文",
    "Hello, world! It's 2026: 12345 items.",
    "thumbs 👍🏽 up\n\n  indented\tline  ",
)
_REPLACED = "_openjev_replaced"
# transformers' generic classes load tokenizer.json as it is: nothing to compare (parsing the file again
# costs seconds for a large vocabulary)
_AS_WRITTEN = ("PreTrainedTokenizerFast", "TokenizersBackend")  # on a corrected tokenizer: the class transformers had chosen


def tokenizer_name(tokenizer: Any) -> str:
    """The class that tokenizes, and when the check replaced transformers' choice, which one and why."""
    name = type(tokenizer).__name__
    if replaced := getattr(tokenizer, _REPLACED, None):
        return f"{name} (tokenizer.json as written; {replaced} split text differently)"
    return name


def faithful(tokenizer: Any, model: str, **kw: Any) -> Any:
    """`tokenizer` when it splits the probe strings as the checkpoint's tokenizer.json does (or there is no
    tokenizer.json to hold it to), else the file loaded as it is (`kw`: the loader's trust options). Raises
    BackendError when that does not agree either."""
    if type(tokenizer).__name__ in _AS_WRITTEN:
        return tokenizer
    path = _tokenizer_file(model)
    if path is None:
        return tokenizer
    from tokenizers import Tokenizer

    try:
        ref = Tokenizer.from_file(str(path))
    except Exception:  # a file the tokenizers library cannot read: transformers' load is all there is
        return tokenizer
    if _agrees(tokenizer, ref):
        return tokenizer
    from transformers import PreTrainedTokenizerFast

    fixed = PreTrainedTokenizerFast.from_pretrained(model, **kw)
    if not _agrees(fixed, ref):
        raise BackendError(
            f"{model}: {type(tokenizer).__name__} (transformers) tokenizes text differently from the "
            f"checkpoint's tokenizer.json, and loading the file as it is does not agree either; a newer "
            "transformers may load it right"
        )
    setattr(fixed, _REPLACED, type(tokenizer).__name__)
    return fixed


def _agrees(tokenizer: Any, ref: Any) -> bool:
    """The same ids for every probe, as content is tokenized (readouts/text.py: no special tokens added)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a slow tokenizer: the prompt stage refuses it (TextTokenizer) with its own message
        return True
    mine = backend.encode_batch(list(PROBES), add_special_tokens=False)
    theirs = ref.encode_batch(list(PROBES), add_special_tokens=False)
    return all(a.ids == b.ids for a, b in zip(mine, theirs, strict=True))


def _tokenizer_file(model: str) -> Path | None:
    """The checkpoint's tokenizer.json: in its folder, or (a hub id) where the loader has just cached it."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        f = folder / "tokenizer.json"
        return f if f.is_file() else None
    try:
        from transformers.utils import cached_file

        found = cached_file(
            model, "tokenizer.json", _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
        )  # fmt: skip
    except Exception:
        return None
    return Path(found) if found else None
