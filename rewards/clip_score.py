"""CLIPScore and RefCLIPScore (Hessel et al., 2021, "CLIPScore: A Reference-free Evaluation Metric
for Image Captioning", arXiv:2104.08718) as rewards, from a LOCAL CLIP model folder.

``CLIPScore(c, v) = w * max(cos(E_c, E_v), 0)`` with ``w = 2.5``;
``RefCLIPScore = harmonic_mean(CLIPScore, max(max_r cos(E_c, E_r), 0))`` over reference captions.

No hub access at run time: ``model_path`` must be a folder with a ``CLIPModel``, its tokenizer and
its image processor (``save_pretrained`` output). Only the path is pickled; each process loads the
model once, on first use. This reward needs the image itself, so it sets ``needs_images = True`` and
vlrollout's workflows then pass ``images`` in the task data (they are dropped for other rewards to
keep the pool's pickling cheap). It sets ``run_in_thread = True``: vlrollout's workflows run it in
a thread, not in AReaL's forked reward pool, where torch can hang after the parent used it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from .result import Reward, RewardResult, require_field


@lru_cache(maxsize=2)
def _load(model_path: str, device: str) -> tuple[Any, Any, Any]:
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPModel

    model = CLIPModel.from_pretrained(model_path, local_files_only=True).to(device).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
    image_processor = AutoImageProcessor.from_pretrained(model_path, local_files_only=True)
    return model, tokenizer, image_processor


def _features(output: Any) -> Any:
    """transformers 5 returns a model output from ``get_*_features``; 4.x returned the tensor."""
    import torch

    return output if torch.is_tensor(output) else output.pooler_output


class CLIPScoreReward(Reward):
    """CLIPScore of the completion against the item's image; RefCLIPScore with ``use_references``.

    Args:
        model_path: Local folder of a ``CLIPModel`` with tokenizer and image processor.
        weight: ``w`` in the paper (2.5), which stretches cosine similarities to about [0, 1].
        use_references: Combine with the references in ``task_data[references_key]``
            (RefCLIPScore).
        references_key: Task field holding reference captions.
        image_index: Which of the item's images to score against.
        device: ``cpu`` or ``cuda``.
    """

    name = "clip_score"
    needs_images = True
    # AReaL's reward pool forks; a forked child of a process that already ran torch can hang on
    # torch's inherited thread pools, so vlrollout runs this reward in a thread instead.
    run_in_thread = True

    def __init__(
        self,
        model_path: str,
        weight: float = 2.5,
        *,
        use_references: bool = False,
        references_key: str = "captions",
        image_index: int = 0,
        device: str = "cpu",
    ) -> None:
        self.model_path = str(model_path)
        self.weight = weight
        self.use_references = use_references
        self.references_key = references_key
        self.image_index = image_index
        self.device = device
        if use_references:
            self.name = "ref_clip_score"

    def embed(self, texts: list[str], image: Any) -> tuple[Any, Any]:
        """L2-normalised text embeddings ``[len(texts), D]`` and image embedding ``[1, D]``."""
        import torch

        from vlrollout.processors.image_loading import load_image

        model, tokenizer, image_processor = _load(self.model_path, self.device)
        picture = load_image(image, "clip_score image").image
        pixels = image_processor(images=[picture], return_tensors="pt")["pixel_values"]
        max_len = getattr(model.config.text_config, "max_position_embeddings", 77)
        tokens = tokenizer(
            texts, return_tensors="pt", padding=True, truncation=True, max_length=max_len
        )
        with torch.no_grad():
            text = _features(model.get_text_features(**tokens.to(self.device)))
            vision = _features(model.get_image_features(pixel_values=pixels.to(self.device)))
        text = torch.nn.functional.normalize(text.float(), dim=-1)
        vision = torch.nn.functional.normalize(vision.float(), dim=-1)
        return text, vision

    def compute(
        self,
        prompt: str,
        completions: str,
        prompt_ids: list[int],
        completion_ids: list[int],
        **task_data: Any,
    ) -> RewardResult:
        images = require_field(task_data, "images", self.name)
        if not isinstance(images, list | tuple) or len(images) <= self.image_index:
            raise ValueError(
                f"{self.name}: task_data['images'] has no image {self.image_index} "
                f"(got {type(images).__name__} of length {len(images) if hasattr(images, '__len__') else '?'})"
            )
        if not completions.strip():
            return RewardResult(0.0, "empty_caption")
        references: list[str] = []
        if self.use_references:
            references = [str(r) for r in require_field(task_data, self.references_key, self.name)]
            if not references:
                raise ValueError(f"{self.name}: task_data['{self.references_key}'] is empty")
        text, vision = self.embed([completions, *references], images[self.image_index])
        clip = self.weight * max(float(text[0] @ vision[0]), 0.0)
        if not self.use_references:
            return RewardResult(clip)
        ref = max(max(float(text[0] @ text[i]) for i in range(1, len(references) + 1)), 0.0)
        combined = 0.0 if clip + ref == 0 else 2 * clip * ref / (clip + ref)
        return RewardResult(combined, None, {"clip_score": clip, "reference_similarity": ref})
