"""openjev_batch/images.py: an image value of a row read and checked safely (real files made with PIL): the
bad-image table of issue 33 is a problem text, never an exception past the row, and no file outside what the
user named is read."""

from __future__ import annotations

import base64
import io
import os
import struct
import warnings
import zlib
from pathlib import Path

import pytest
from PIL import Image

from openjev_batch.images import (
    MAX_IMAGE_BYTES,
    MAX_IMAGES_PER_ROW,
    ImageProblem,
    image_list,
    image_ref,
)


def png_bytes(w: int = 8, h: int = 6, color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "PNG")
    return buf.getvalue()


def huge_png_header(w: int, h: int) -> bytes:
    """A real PNG whose IHDR claims w × h pixels (its CRC fixed): a few bytes on disk."""
    data = bytearray(png_bytes())
    data[16:24] = struct.pack(">II", w, h)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    d = tmp_path / "input"
    d.mkdir()
    (d / "ok.png").write_bytes(png_bytes())
    return d


def problem(value, root) -> str:
    with pytest.raises(ImageProblem) as e:
        image_ref(value, str(root) if root else None)
    return str(e.value)


def test_a_good_file_is_read_relative_to_the_input_folder(folder):
    ref = image_ref("ok.png", str(folder))
    assert (ref.width, ref.height, ref.format) == (8, 6, "PNG")
    assert ref.path == str((folder / "ok.png").resolve()) and ref.data is None  # the bytes are not kept
    assert ref.load().size == (8, 6)
    assert image_ref(str(folder / "ok.png"), None).sha256 == ref.sha256  # absolute: read as written


def test_bytes_and_data_urls_are_read_inline():
    raw = png_bytes(5, 4)
    assert image_ref(raw, None).width == 5
    assert image_ref({"bytes": raw, "path": None}, None).height == 4  # `datasets`' Image feature
    url = "data:image/png;base64," + base64.b64encode(raw).decode()
    assert image_ref(url, None).data == raw


def test_the_bad_image_table(folder, tmp_path):
    (folder / "empty.png").write_bytes(b"")
    noisy = io.BytesIO()
    Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3)).save(noisy, "PNG")
    (folder / "truncated.png").write_bytes(noisy.getvalue()[: len(noisy.getvalue()) // 2])
    (folder / "garbage.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(200))
    (folder / "huge.png").write_bytes(huge_png_header(50_000, 50_000))
    tiff = io.BytesIO()
    Image.new("RGB", (4, 4)).save(tiff, "TIFF")
    (folder / "scan.tiff").write_bytes(tiff.getvalue())
    (folder / "notes.txt").write_text("not an image")
    outside = tmp_path / "secret.png"
    outside.write_bytes(png_bytes())
    (folder / "link.png").symlink_to(outside)
    os.mkfifo(folder / "pipe.png")
    with open(folder / "big.png", "wb") as f:
        f.truncate(MAX_IMAGE_BYTES + 1)  # sparse: nothing written

    assert "no such file" in problem("missing.png", folder)
    assert "empty (0 bytes)" in problem("empty.png", folder)
    assert "corrupt image" in problem("truncated.png", folder)
    assert "garbage.png" in problem("garbage.png", folder)
    assert "over the limit of 40,000,000 pixels (Image size (2500000000 pixels)" in problem("huge.png", folder)
    (folder / "large.png").write_bytes(huge_png_header(8_000, 6_000))  # under Pillow's own limit, over ours
    assert "8,000 × 6,000 pixels, limit 40,000,000" in problem("large.png", folder)
    (folder / "warned.png").write_bytes(huge_png_header(12_000, 10_000))  # Pillow only warns of these
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "12,000 × 10,000 pixels, limit" in problem("warned.png", folder)
    assert "unsupported format TIFF" in problem("scan.tiff", folder)
    assert "not an image" in problem("notes.txt", folder)
    assert "a symlink out of the input's folder" in problem("link.png", folder)
    assert "outside the input's folder" in problem("../secret.png", folder)
    assert "not a regular file" in problem("pipe.png", folder)  # a FIFO: refused, not waited on
    assert f"{MAX_IMAGE_BYTES + 1:,} bytes, limit" in problem("big.png", folder)
    assert "URLs are not fetched" in problem("https://example.com/cat.png", folder)
    assert "URLs are not fetched" in problem("file:///etc/passwd", folder)
    assert "relative path needs an input file" in problem("ok.png", None)
    assert "invalid base64" in problem("data:image/png;base64,@@@", None)
    assert "got a number" in problem(7, folder)


def test_an_absolute_path_into_the_folder_keeps_the_symlink_rule(folder, tmp_path):
    (tmp_path / "secret.png").write_bytes(png_bytes())
    (folder / "link.png").symlink_to(tmp_path / "secret.png")
    assert "symlink out" in problem(str(folder / "link.png"), folder)


def test_a_file_changed_after_its_check_is_refused_when_read_again(folder):
    ref = image_ref("ok.png", str(folder))
    (folder / "ok.png").write_bytes(png_bytes(color=(0, 0, 0)))
    with pytest.raises(ImageProblem, match="changed since the row was read"):
        ref.read_bytes()


def test_images_lists():
    assert image_list("a.png", many=False) == ["a.png"]
    assert image_list('["a.png", "b.png"]', many=True) == ["a.png", "b.png"]
    with pytest.raises(ImageProblem, match="at most"):
        image_list(["x.png"] * (MAX_IMAGES_PER_ROW + 1), many=True)
    with pytest.raises(ImageProblem, match="expected a list"):
        image_list("a.png", many=True)


def test_the_readmes_vision_model_recipe_runs_images_on_a_cpu(tmp_path):
    """Issue 42: images could not be tried on a CPU from the README (no packaged model reads images, the tiny
    VL builder sat in tests/). The README's two commands (scripts/make_test_vl_model.py) build a model and an
    example offline, and `run` answers every row of it, an image in each."""
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq
    from conftest import ROOT, cli

    model, example = tmp_path / "test_vl_model", tmp_path / "try_images"
    made = subprocess.run(
        [sys.executable, str(ROOT / "scripts/make_test_vl_model.py"), str(model), "--example", str(example)],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    # issue 48.17: it says what it does while it works (stderr; stdout holds the two paths)
    steps = [ln for ln in made.stderr.splitlines() if ln[:4] in ("1/3 ", "2/3 ", "3/3 ")]
    assert [s[:3] for s in steps] == ["1/3", "2/3", "3/3"] and "a random Qwen3-VL" in steps[1], made.stderr
    assert made.stdout.split() == [str(model), str(example)]
    out = tmp_path / "out_images.parquet"
    r = cli("run", example / "rows.jsonl", "-q", example / "questions.yaml", "-m", model, "-b", "hf", "-o", out,
            "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    t = pq.read_table(out).to_pylist()
    assert len(t) == 6 and all(x["error"] is None and x["prefix_tokens"] > 20 for x in t)
    rows = [json.loads(x) for x in (example / "rows.jsonl").read_text().splitlines()]
    assert {"image", "images"} <= {k for x in rows for k in x} and any(isinstance(x["state"], list) for x in rows)


def test_a_phones_mpo_jpeg_is_accepted_as_a_jpeg(folder):
    """Attack trial (issue 42): a JPEG with a second picture (Multi-Picture Format, as phones write them) opens
    in Pillow as MPO and was refused as an unsupported format. It is read as the JPEG it starts with."""
    Image.new("RGB", (32, 24), (200, 0, 0)).save(
        folder / "phone.jpg", "MPO", save_all=True, append_images=[Image.new("RGB", (32, 24), (0, 0, 200))]
    )
    assert Image.open(folder / "phone.jpg").format == "MPO"
    ref = image_ref("phone.jpg", str(folder))
    assert (ref.width, ref.height, ref.format) == (32, 24, "JPEG")
    assert ref.load().getpixel((0, 0))[0] > 150  # the first picture, the red one


def test_odd_image_names_are_one_plain_line_each(folder, tmp_path):
    """Attack trial (issue 48.7–8): a symlink loop and a 300-character name were `RuntimeError: Symlink loop`
    and `OSError: [Errno 36] …`; a `data:` URL of text was "URLs are not fetched"; a file name holding a newline
    printed over two lines. Each is one line in `validate`'s report, in words, with no Python internals."""
    import json
    import subprocess
    import sys

    (folder / "loop").symlink_to("loop")
    (folder / "a\nb.png").write_bytes(png_bytes())
    long = "x" * 300 + ".png"
    assert problem("loop", folder) == "'loop': a symbolic link loop (a link that leads back to itself)"
    assert problem(long, folder) == f"{long!r}: file name too long"
    assert problem("data:text/plain;base64,aGk=", None) == (
        "a data: URL of text/plain;base64, not an image's base64 bytes (give data:image/<format>;base64,<data>, "
        "or a file path)"
    )
    assert image_ref("a\nb.png", str(folder)).source == "a\\nb.png"  # its name in messages and --show-prompt
    rows = [{"id": i, "state": "hi", "image": v} for i, v in
            enumerate(["loop", long, "data:text/plain;base64,aGk=", "a\nb.png"])]  # fmt: skip
    src = folder / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "q.json").write_text(json.dumps({"q": {"type": "noul", "instructions": "Is it red?"}}))
    r = subprocess.run([sys.executable, "-m", "openjev_batch", "validate", src, "-q", folder / "q.json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    said = r.stdout + r.stderr
    assert r.returncode == 3 and "(image: 3)" in said, said
    assert "row 0: image: 'loop': a symbolic link loop" in said and "row 1: image: 'xxx" in said
    assert "row 2: image: a data: URL of text/plain" in said
    for internal in ("RuntimeError", "OSError", "Errno", "URLs are not fetched"):
        assert internal not in said, said
