"""readouts/rows_images.py: a label-readout row's images (the `image` / `images` column and
content parts in its messages) parsed into the row, every problem the row's error naming row and field; the
prefix key tells rows with one text and other images apart. No model: real image files made with PIL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from openjev_batch.core import RowError
from openjev_batch.images import MAX_IMAGES_PER_ROW
from openjev_batch.readouts.image_prompt import body_pieces
from openjev_batch.readouts.label_logprobs import LabelLogprobs

Q = {"q": {"type": "noul", "instructions": "Is it red?"}}


@pytest.fixture
def readout(tmp_path: Path) -> LabelLogprobs:
    Image.new("RGB", (10, 10), (255, 0, 0)).save(tmp_path / "red.png")
    Image.new("RGB", (10, 10), (0, 0, 255)).save(tmp_path / "blue.png")
    return LabelLogprobs(image_root=str(tmp_path))


def parse(readout, **rec):
    return readout.parse_row(0, {"id": "r", "questions": Q, **rec})


def user(*parts):
    return [{"role": "user", "content": list(parts)}]


def test_column_images_and_content_parts_are_read_in_order(readout):
    row = parse(readout, state="A photo.", images=["red.png", "blue.png"])
    assert [i.source for i in row.images] == ["red.png", "blue.png"]
    assert body_pieces(row)[2:] == ["Text:\nA photo."] and body_pieces(row)[0] is row.images[0]
    conv = user({"type": "text", "text": "See "}, {"type": "image", "image": "red.png"},
                {"type": "image_url", "image_url": {"url": "blue.png"}}, {"type": "text", "text": " ok? "})  # fmt: skip
    row = parse(readout, state=json.dumps(conv))  # a JSON text of the conversation, as a CSV cell holds it
    pieces = body_pieces(row)
    assert pieces[0] == "Conversation:\nuser: See " and pieces[-1] == " ok?"  # trailing space dropped
    assert [p.source for p in pieces[1:3]] == ["red.png", "blue.png"]
    assert row.messages[0].content == "See  ok? "


def test_text_only_content_parts_are_a_plain_message(readout):
    row = parse(readout, state=user({"type": "text", "text": "hello"}, {"type": "text", "text": " there"}))
    assert row.messages[0].content == "hello there" and row.messages[0].parts == ()


@pytest.mark.parametrize(
    ("rec", "error"),
    [
        ({"state": "x", "image": "nope.png"}, "row r: image: 'nope.png': no such file"),
        ({"state": "x", "images": ["red.png", "nope.png"]}, "row r: images[1]: 'nope.png': no such file"),
        ({"state": "x", "image": "red.png", "images": ["red.png"]}, "row r: image, images: give one of the two"),
        ({"state": "x", "images": "red.png"}, "row r: images: expected a list of images, got text"),
        ({"state": "x", "images": ["red.png"] * (MAX_IMAGES_PER_ROW + 1)}, "row r: images: 17 images, at most 16"),
        ({"state": user({"type": "video", "video": "v.mp4"})},
         "row r: state: messages[0].content[0].type: unsupported part type 'video'"),
        ({"state": user({"type": "image"})}, "row r: state: messages[0].content[0].image: missing"),
        ({"state": user({"type": "text", "text": 3})}, "row r: state: messages[0].content[0].text: expected a string"),
        ({"state": user({"type": "image", "image": "../x.png"})},
         "row r: state.messages[0].content[0].image: '../x.png': outside the input's folder"),
        ({"state": user({"type": "image_url", "image_url": {"url": "https://a.b/c.png"}})},
         "row r: state.messages[0].content[0].image_url: 'https://a.b/c.png': URLs are not fetched"),
    ],
)  # fmt: skip
def test_bad_images_are_the_rows_error_naming_the_field(readout, rec, error):
    row = parse(readout, **rec)
    assert isinstance(row, RowError) and row.error.startswith(error), row
    assert row.qids == ("q",)  # the row's questions still get their output rows


def test_images_over_the_row_limit_across_column_and_parts(readout):
    conv = user(*[{"type": "image", "image": "red.png"}] * 2)
    row = parse(readout, state=conv, images=["red.png"] * (MAX_IMAGES_PER_ROW - 1))
    assert isinstance(row, RowError) and "more than 16 images in the row" in row.error


def test_the_prefix_key_tells_other_images_apart(readout):
    red, blue = parse(readout, state="x", image="red.png"), parse(readout, state="x", image="blue.png")
    again = parse(readout, state="x", image="red.png")
    assert readout.prefix_key(red) == readout.prefix_key(again) != readout.prefix_key(blue)
    assert readout.prefix_key(parse(readout, state="x")) == "Text:\nx"  # text rows keep their key
