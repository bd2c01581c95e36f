"""Rewards the example's YAML names by import path, built once per process from vlrollout's registry.

AReaL's single-controller mode sends ``workflow_kwargs`` to the rollout workers as JSON, so a
reward cannot travel as an object: the YAML gives an import path (``vlrollout.reward``) and each
worker imports the object built here. The objects are picklable (they run in vlrollout's reward
process pool, ``vlrollout.rewards.executor``).

The grounding reward parses Qwen2.5-VL's box format (``{"bbox_2d": [...]}`` in pixels of the
resized image), matching the YAML's ``actor.path``; change ``family`` with the model
(see ``vlrollout.rewards.box_parsing``).
"""

from __future__ import annotations

from vlrollout.rewards import ByTask
from vlrollout.rewards.registry import get_reward

#: Exact count, for items with ``task: count`` and an ``answer``.
count = get_reward("count")

#: IoU of the first predicted box with the label ``boxes`` (original-image pixels).
grounding_iou = get_reward("iou", family="qwen2_5_vl")

#: BLEU-4 against the item's ``captions``. (CIDEr-D needs the training references to fix its
#: document frequencies; build it with ``corpus=`` once the data is known, as
#: ``vlrollout.tiny.rewards.shapes_task_reward`` does.)
caption_bleu4 = get_reward("bleu4")

#: The mixed synthetic set from ``vlrollout make-samples``: routed by each item's ``task`` field.
shapes = ByTask({"count": count, "ground": grounding_iou, "caption": caption_bleu4})
