"""``model_inputs`` / ``image_geometry``: a data item as a trainer's model inputs plus geometry,
by the same preparation as our workflows (every source form, EXIF, limits)."""

import io

import pytest
import torch
from PIL import Image

from tests.processors.images import bomb_png, halves, png_bytes
from vlrollout.processors.auto import AutoProcessorPreprocessor
from vlrollout.processors.errors import PreprocessError
from vlrollout.processors.for_trainers import image_geometry, model_inputs


def _item(image, text="Where is the red half?"):
    return {
        "id": "a",
        "messages": [{"role": "user", "content": f"<image>{text}"}],
        "images": [image],
    }


def test_the_inputs_are_the_prepared_prompt_with_a_batch_dimension(offline):
    processor = offline("qwen2_vl")
    item = _item(halves((70, 40)))
    prepared = AutoProcessorPreprocessor(processor).prepare(item)
    inputs = model_inputs(item, processor)
    assert inputs["input_ids"].tolist() == [prepared.input_ids]
    assert inputs["attention_mask"].tolist() == [[1] * len(prepared.input_ids)]
    assert inputs["input_ids"].dtype == torch.long
    for key, tensor in prepared.multi_modal_input.items():
        assert torch.equal(inputs[key], tensor), key
    assert inputs["mm_token_type_ids"].tolist() == [prepared.mm_token_type_ids]
    assert inputs["geometry"] == [g.to_dict() for g in prepared.geometry]
    # The model runs on them as they are (less the geometry).
    assert set(inputs) - {"geometry"} <= {
        "input_ids",
        "attention_mask",
        "pixel_values",
        "image_grid_thw",
        "mm_token_type_ids",
    }


def test_exif_orientation_is_applied_and_the_geometry_is_of_the_upright_image(offline):
    processor = offline("qwen2_5_vl")
    image = halves((70, 40))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees: the upright image is 40 x 70
    encoded = io.BytesIO()
    image.save(encoded, "JPEG", exif=exif)
    geometry = model_inputs(_item(encoded.getvalue()), processor)["geometry"][0]
    assert (geometry["original_width"], geometry["original_height"]) == (40, 70)
    assert image_geometry([image.transpose(Image.Transpose.ROTATE_270)], processor) == [geometry]


def test_image_geometry_equals_the_full_items_and_takes_every_source_form(offline):
    processor = offline("qwen2_5_vl")
    image = halves((90, 30))
    full = model_inputs(_item(image), processor)["geometry"]
    assert image_geometry([png_bytes(image)], processor) == full
    assert image_geometry([], processor) == []
    assert full[0]["model_width"] != 90  # resized: the geometry is not the identity


def test_a_bad_item_raises_naming_the_item_and_the_reason(offline):
    processor = offline("qwen2_vl")
    with pytest.raises(PreprocessError) as e:
        model_inputs(_item(bomb_png(30_000, 30_000)), processor)
    assert e.value.item == "item a, image 1" and e.value.reason == "image_too_large"
    with pytest.raises(PreprocessError, match="placeholder"):
        model_inputs({"id": "b", "messages": "no placeholder", "images": [halves()]}, processor)


class _Rewording(AutoProcessorPreprocessor):
    """A plug-in that changes the item it is given, as the docs allow: it gets a copy."""

    def prepare(self, data):
        data["messages"][0]["content"] = "<image>Name the colour on the right."
        data["images"].append(data["images"][0])
        data["messages"][0]["content"] += "<image>"
        data["label"] = "rewritten"
        return super().prepare(data)


def test_a_plugin_that_changes_its_data_leaves_the_callers_item_alone(offline, tmp_path):
    """model_inputs, a snapshot and the trainer's warm-up batch each hand the plug-in a copy."""
    from vlrollout.snapshots import take_snapshot
    from vlrollout.train.warmup import warm_up_batch

    pre = _Rewording(offline("qwen2_vl"))
    item = {**_item(halves((56, 56))), "label": "kept"}
    before = repr(item)
    inputs = model_inputs(item, pre)
    assert len(inputs["geometry"]) == 2  # the plug-in's change reached its own copy
    take_snapshot(pre, [item])
    warm_up_batch(pre, [item], groups=1, group_size=1, new_tokens=1)
    assert repr(item) == before


@pytest.mark.parametrize("templated", [False, True], ids=["messages", "templated string"])
@pytest.mark.parametrize("field", ["images", "videos"])
def test_media_given_as_one_string_is_refused_not_read_letter_by_letter(
    offline, tmp_path, field, templated
):
    """``"images": "photo.png"`` (one path, not a list of them) was read as a list of its
    letters: "data['images'] has 9 image(s)", or "/" as a folder to open."""
    processor = offline("qwen2_vl")
    path = tmp_path / "kiwi.png"
    halves((48, 40)).save(path)
    marker = "<image>" if field == "images" else "<video>"
    text = f"{marker}What fruit?"
    if templated:
        text = processor.apply_chat_template(
            [{"role": "user", "content": [{"type": field[:-1]}, {"type": "text", "text": "?"}]}],
            tokenize=False,
        )
    item = {"id": "k", "messages": text if templated else [{"role": "user", "content": text}]}
    with pytest.raises(PreprocessError) as info:
        model_inputs({**item, field: str(path)}, processor)
    err = info.value
    assert (err.item, err.reason) == ("item k", f"bad_{field}"), err
    assert "must be a list" in err.detail and "str" in err.detail
