import base64
import io

import pytest
import torch
from PIL import Image

from tests.processors.images import halves, png_bytes
from vlrollout.processors import AutoProcessorPreprocessor, PreprocessError, Preprocessor
from vlrollout.tiny.tokenizer import build_bpe_tokenizer


@pytest.fixture
def qwen(offline):
    return AutoProcessorPreprocessor(offline("qwen2_vl"))


def item(content, images=(), **extra):
    return {"messages": [{"role": "user", "content": content}], "images": list(images), **extra}


def test_implements_protocol(qwen):
    assert isinstance(qwen, Preprocessor)
    assert qwen.tokenizer is qwen.processor.tokenizer


def test_text_only_item(qwen):
    prepared = qwen.prepare(item("How many shapes?"))
    assert (
        prepared.prompt_text
        == "<|im_start|>user\nHow many shapes?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prepared.input_ids == qwen.tokenizer(prepared.prompt_text)["input_ids"]
    assert (
        prepared.multi_modal_input == {} and prepared.image_data == [] and prepared.geometry == []
    )
    assert prepared.vision_msg_vllm is None
    assert prepared.mm_token_type_ids == [0] * prepared.prompt_len


def test_text_only_with_plain_tokenizer():
    tok = build_bpe_tokenizer()
    pre = AutoProcessorPreprocessor(tok)
    messages = [{"role": "user", "content": "Answer with a number."}]
    prepared = pre.prepare({"messages": messages})
    assert prepared.input_ids == list(
        tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    )
    assert prepared.multi_modal_input == {} and prepared.image_token_id is None
    with pytest.raises(PreprocessError) as info:
        pre.prepare(item("<image>", [halves()], id=3))
    assert info.value.reason == "images_unsupported" and info.value.item == "item 3"


def test_placeholder_mismatch_through_prepare(qwen):
    with pytest.raises(PreprocessError) as info:
        qwen.prepare(item("<image> and <image>", [halves()], id=5))
    assert info.value.reason == "placeholder_mismatch" and info.value.item == "item 5"
    assert "2 image placeholder" in info.value.detail and "1 image(s)" in info.value.detail


def test_literal_family_token_in_text_is_a_mismatch(qwen):
    with pytest.raises(PreprocessError) as info:
        qwen.prepare(item("sneaky <|image_pad|> token"))
    assert info.value.reason == "placeholder_mismatch"
    assert "holds 1" in info.value.detail and "0 image(s)" in info.value.detail


def test_bad_image_names_item_and_image(qwen, rgb_png):
    with pytest.raises(PreprocessError) as info:
        qwen.prepare(item("<image><image>", [rgb_png, b"not an image"], id=17))
    assert info.value.item == "item 17, image 2" and info.value.reason == "image_decode"


def test_engine_request_fields(qwen, rgb_png):
    prepared = qwen.prepare(item("<image>Q", [rgb_png]))
    # unchanged RGB PNG passes through byte for byte
    assert base64.b64decode(prepared.image_data[0]) == rgb_png.read_bytes()
    parts = prepared.vision_msg_vllm[0]["content"]
    assert parts[0] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64," + prepared.image_data[0]},
    }
    assert parts[1] == {"type": "text", "text": "Q"}


@pytest.mark.parametrize("kind", ["exif_jpeg", "rgba_png", "pil"])
def test_engine_sees_the_trainer_pixels(qwen, kind):
    """Re-running the processor on what the engine decodes reproduces the trainer's pixel_values."""
    exif = Image.Exif()
    exif[0x0112] = 8
    source = {
        "exif_jpeg": png_bytes(halves((60, 30)), "JPEG", exif=exif),
        "rgba_png": png_bytes(Image.new("RGBA", (50, 40), (255, 0, 0, 60)), "PNG"),
        "pil": halves((50, 40)),
    }[kind]
    prepared = qwen.prepare(item("<image>", [source]))
    engine_image = Image.open(io.BytesIO(base64.b64decode(prepared.image_data[0]))).convert("RGB")
    again = qwen.processor(
        text=[prepared.prompt_text], images=[[engine_image]], return_tensors="pt"
    )
    assert torch.equal(again["pixel_values"], prepared.multi_modal_input["pixel_values"])
    assert again["input_ids"][0].tolist() == prepared.input_ids


def test_inline_image_url_part(qwen, rgb_png):
    url = "data:image/png;base64," + base64.b64encode(rgb_png.read_bytes()).decode()
    content = [{"type": "text", "text": "Q"}, {"type": "image_url", "image_url": {"url": url}}]
    prepared = qwen.prepare(item(content))
    assert prepared.num_images == 1 and prepared.geometry[0].original_width == 70


def test_max_pixels_goes_through_the_processor(offline):
    processor = offline("qwen2_vl")
    big = Image.new("RGB", (300, 300), "white")
    small = AutoProcessorPreprocessor(processor, max_pixels=60 * 60).prepare(item("<image>", [big]))
    default = AutoProcessorPreprocessor(processor).prepare(item("<image>", [big]))
    assert small.multi_modal_input["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert default.multi_modal_input["image_grid_thw"].tolist() == [
        [1, 6, 6]
    ]  # 112*112 budget, floored
    assert (small.geometry[0].model_width, small.geometry[0].model_height) == (56, 56)
    ref = processor(
        text=[small.prompt_text],
        images=[[big]],
        size={"shortest_edge": 56 * 56, "longest_edge": 60 * 60},
        return_tensors="pt",
    )
    assert torch.equal(ref["pixel_values"], small.multi_modal_input["pixel_values"])
    assert processor.image_processor.max_pixels == 112 * 112  # processor not mutated


def test_lone_min_pixels_is_honoured_by_the_fast_processor(offline):
    pre = AutoProcessorPreprocessor(offline("qwen3_vl"), min_pixels=128 * 128)
    prepared = pre.prepare(item("<image>", [Image.new("RGB", (32, 32))]))
    assert prepared.multi_modal_input["image_grid_thw"].tolist() == [[1, 8, 8]]  # 128/16
    assert (prepared.geometry[0].model_width, prepared.geometry[0].model_height) == (128, 128)


def test_resize_budget_rejected_for_fixed_size_family(offline):
    with pytest.raises(ValueError, match="fixed size"):
        AutoProcessorPreprocessor(offline("llava"), max_pixels=1000)
    with pytest.raises(ValueError, match="exceeds"):
        AutoProcessorPreprocessor(offline("qwen2_vl"), min_pixels=10_000, max_pixels=100)


def test_image_size_limit_applies(offline, rgb_png):
    pre = AutoProcessorPreprocessor(offline("qwen2_vl"), max_image_pixels=100)
    with pytest.raises(PreprocessError) as info:
        pre.prepare(item("<image>", [rgb_png], uid="u1"))
    assert info.value.reason == "image_too_large" and info.value.item == "item u1, image 1"
    # the decode limit is not the resize budget: the message names the option that raises it
    assert "max_image_pixels=100" in info.value.detail and "--max-pixels" in info.value.detail
    from vlrollout.processors.registry import get_preprocessor

    raised = get_preprocessor("auto", processor=offline("qwen2_vl"), max_image_pixels=10**9)
    assert raised.prepare(item("<image>", [rgb_png], uid="u1")).num_images == 1


def test_missing_chat_template_is_a_config_error():
    tok = build_bpe_tokenizer(chat_template=None)
    with pytest.raises(ValueError, match="no chat template"):
        AutoProcessorPreprocessor(tok)


def test_loads_a_local_processor_directory(offline, tmp_path, rgb_png):
    offline("qwen2_vl").save_pretrained(tmp_path / "proc")
    pre = AutoProcessorPreprocessor(tmp_path / "proc", max_pixels=56 * 56)
    assert pre.family == "qwen2_vl"
    prepared = pre.prepare(item("<image>", [rgb_png]))
    assert (
        prepared.input_ids.count(prepared.image_token_id)
        == int(prepared.multi_modal_input["image_grid_thw"].prod(-1).sum()) // 4
    )


def test_an_item_is_named_by_the_id_fields_the_data_readers_read():
    """A VQA row's ``question_id`` names it in errors and the ledger, as in ``validate-data``."""
    from vlrollout.processors.auto import item_label

    assert item_label({"question_id": 262148000, "question": "?"}) == "item 262148000"
    assert item_label({"id": "a", "question_id": 5}) == "item a"
    assert item_label({"question": "?"}) == "item"
