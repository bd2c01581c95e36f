"""The recipe's small parts: per-step statistics, item order, report, config checks."""

from __future__ import annotations

import pytest
import torch

from vlrollout.jsonl import append_jsonl
from vlrollout.train.batch import compute_advantages
from vlrollout.train.config import TrainSection
from vlrollout.train.data import batch_items
from vlrollout.train.report import write_report
from vlrollout.train.stats import pick, rollout_stats


def _group(rewards, tokens):
    return {
        "rewards": torch.tensor(rewards, dtype=torch.float32),
        "loss_mask": torch.ones(len(rewards), tokens, dtype=torch.int32),
    }


def test_rollout_stats_counts_all_equal_groups():
    batch = [_group([1.0, 1.0], 3), _group([0.0, 1.0], 2)]
    s = rollout_stats(batch, rollout_s=2.0)
    assert s["frac_all_equal_groups"] == 0.5
    assert s["reward_mean"] == 0.75 and s["reward_std"] == pytest.approx(0.4330127)
    assert s["gen_tokens"] == 10 and s["tokens_per_s"] == 5.0


def test_batch_items_cover_each_epoch_once_and_repeat_on_resume():
    items = [{"id": i} for i in range(10)]
    epoch = [it["id"] for step in range(5) for it in batch_items(items, step, 2, seed=3)]
    assert sorted(epoch) == list(range(10))
    assert batch_items(items, 7, 2, 3) == batch_items(items, 7, 2, 3)
    assert batch_items(items, 5, 2, 3) != batch_items(items, 0, 2, 3)


def test_pick_finds_areal_scoped_stats():
    stats = {"ppo_actor/update/clip_ratio/avg": 0.1, "ppo_actor/update/grad_norm": 2.0}
    assert pick(stats, "clip_ratio") == 0.1 and pick(stats, "grad_norm") == 2.0
    assert pick(stats, "entropy") is None


class _SplittingActor:
    """``compute_advantages`` as AReaL's: ``batched_call`` (concat, call, ``split_batch``)."""

    def __init__(self):
        self.seen: list[set[str]] = []

    def compute_advantages(self, data):
        from areal.utils.data import batched_call

        self.seen = [set(d) for d in data]
        return batched_call(lambda batch: {**batch, "advantages": batch["rewards"] * 2}, data)


def test_compute_advantages_keeps_each_trajectorys_own_images_uncopied():
    own = [
        {
            "input_ids": torch.ones(1, 3, dtype=torch.long),
            "attention_mask": torch.ones(1, 3, dtype=torch.bool),
            "rewards": torch.tensor([float(i)]),
            "multi_modal_input": [{"pixel_values": torch.full((1,), float(i))}],
        }
        for i in range(3)
    ]
    actor = _SplittingActor()
    adv = compute_advantages(actor, own)
    assert all("multi_modal_input" not in keys for keys in actor.seen)  # nothing to deep-copy
    assert all(
        a["multi_modal_input"] is t["multi_modal_input"] for a, t in zip(adv, own, strict=True)
    )
    assert [a["advantages"].item() for a in adv] == [0.0, 2.0, 4.0]
    assert all("multi_modal_input" in t for t in own)  # the rollout batch keeps its images


def test_report_draws_reward_and_eval_curves(tmp_path):
    for step in (1, 2):
        append_jsonl(tmp_path / "metrics.jsonl", {"step": step, "reward_mean": 0.1 * step})
    append_jsonl(tmp_path / "eval.jsonl", {"step": 0, "eval/mean": 0.05, "eval/ground": 0.05})
    html = write_report(tmp_path).read_text()
    assert html.count("<polyline") >= 2 and "eval/ground" in html


def test_report_sets_the_held_out_curve_beside_its_lr0_control(tmp_path):
    append_jsonl(tmp_path / "metrics.jsonl", {"step": 1, "reward_mean": 0.1})
    for step, score in ((0, 0.05), (5, 0.02), (10, 0.09)):
        append_jsonl(tmp_path / "eval.jsonl", {"step": step, "eval/mean": score, "eval/n": 8})
    html = write_report(tmp_path).read_text()
    assert "at step 10: 0.09 against 0.05 for the lr = 0 control (+0.04)" in html
    assert "eval/mean (lr = 0 control)" in html
    assert html.count("<polyline") >= 3  # reward, held-out, control


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="vlrollout.task"):
        TrainSection(task="segment")
    with pytest.raises(ValueError, match="ground_metric"):
        TrainSection(ground_metric="dice")
    with pytest.raises(ValueError, match="ground_metric"):
        TrainSection(ground_metric="box_f1")  # a multi-box metric: the tasks have one label box
    with pytest.raises(ValueError, match="dynamic_sampling_rounds"):
        TrainSection(dynamic_sampling_rounds=0)
    with pytest.raises(ValueError, match="ground_metric"):
        TrainSection(ground_metric="acc")  # the key offers iou and giou only


def test_every_ground_metric_option_builds_the_training_reward():
    from vlrollout.tiny.synthetic import generate_items
    from vlrollout.train.config import GROUND_METRICS
    from vlrollout.train.rewards import build_rewards

    items = generate_items("ground", 2, seed=5)
    for metric in GROUND_METRICS:
        TrainSection(ground_metric=metric)
        trained, evaluated = build_rewards("tiny_task", metric, items, items)
        assert trained.rewards["ground"].metric == metric
        assert evaluated.rewards["ground"].metric == "iou"


def test_whole_groups_sets_the_granularity_only_inside_and_only_when_safe():
    from types import SimpleNamespace

    from areal.api.cli_args import MicroBatchSpec
    from transformers import Qwen2Config

    from vlrollout.train.grouping import whole_groups

    spec = MicroBatchSpec(max_tokens_per_mb=64)
    actor = SimpleNamespace(
        config=SimpleNamespace(mb_spec=spec, ppo_n_minibatches=1), model_config=Qwen2Config()
    )
    group = {"attention_mask": torch.ones(4, 10)}
    with whole_groups(actor, [group, group]) as granularity:
        assert granularity == 4 and actor.config.mb_spec.granularity == 4
        assert actor.config.mb_spec.max_tokens_per_mb == 64
    assert actor.config.mb_spec is spec and spec.granularity == 1
    with whole_groups(actor, [group, group], enabled=False) as granularity:
        assert granularity == 1 and actor.config.mb_spec is spec
    actor.config.ppo_n_minibatches = 2  # AReaL splits mini-batches by length, not by group
    with whole_groups(actor, [group, group]) as granularity:
        assert granularity == 1
    actor.config.ppo_n_minibatches = 1
    actor.model_config = Qwen2Config(layer_types=["linear_attention"] * 2, num_hidden_layers=2)
    with whole_groups(actor, [group, group]) as granularity:
        assert granularity == 1  # such a model runs one sequence per micro-batch


def test_report_draws_every_episodes_reward_only_under_dynamic_sampling(tmp_path):
    label = "mean of every episode rolled out"
    plain, dynamic = tmp_path / "plain", tmp_path / "dynamic"
    plain.mkdir(), dynamic.mkdir()
    for step in (1, 2):
        append_jsonl(plain / "metrics.jsonl", {"step": step, "reward_mean": 0.5})
        append_jsonl(
            dynamic / "metrics.jsonl",
            {"step": step, "reward_mean": 0.5, "dynamic/reward_mean_all": 0.8 + step / 100},
        )
    assert label not in write_report(plain).read_text()
    assert label in write_report(dynamic).read_text()


def test_setting_warnings_are_logged_once_by_rank_zero(monkeypatch):
    from vlrollout.train import session
    from vlrollout.train.config import TrainConfig
    from vlrollout.train.ranks import Ranks

    lines: list[str] = []
    monkeypatch.setattr(session.logger, "warning", lambda fmt, *args: lines.append(fmt % args))
    cfg = TrainConfig(vlrollout=TrainSection(dynamic_sampling_scale=True))
    session.prepare_rollout_config(cfg, Ranks(1, 2))
    assert lines == []
    session.prepare_rollout_config(cfg, Ranks(0, 2))
    assert len(lines) == 1 and "dynamic_sampling_scale=true has no effect" in lines[0]


def test_a_text_only_item_among_image_items_is_skipped_naming_it(monkeypatch):
    """AReaL joins a step's trajectories into one batch whose keys must agree, and a text-only
    episode has no images: among image items it would end the run mid-way, so it is skipped at
    load with its reason. A training set of text-only items keeps them all."""
    from vlrollout.train import data

    warned: list[str] = []
    monkeypatch.setattr(data.logger, "warning", lambda msg, *args: warned.append(msg % args))
    image = {"id": "i", "messages": "<image>How many?", "images": ["a.png"], "answer": "2"}
    inline = {
        "id": "j",
        "messages": [{"role": "user", "content": [{"type": "image", "image": "b.png"}]}],
    }
    text = {"id": "t", "messages": "How many legs has a cat?", "answer": "4"}
    kept = data.trainable_items("d.jsonl", [image, text, inline])
    assert [item["id"] for item in kept] == ["i", "j"]
    assert len(warned) == 1 and warned[0].startswith("d.jsonl t skipped: text_only")
    assert data.trainable_items("d.jsonl", [text, dict(text, id="u")]) == [text, dict(text, id="u")]


def test_a_steps_rejections_are_counted_by_reason():
    """metrics.jsonl says why a step's episodes were rejected, not only how many."""
    from vlrollout.train.ranks import Ranks

    ranks = Ranks(rank=0, world=1)
    outcome = {"rejected": 3, "rejected_by_reason": {"image_not_found": 2, "reward_error": 1}}
    assert ranks.by_reason(outcome["rejected_by_reason"], "rejected") == {
        "rejected/image_not_found": 2,
        "rejected/reward_error": 1,
    }
