"""``bench/bench_vs_trl.py`` and its TRL peer, on the parts that need no training run.

The benchmark itself trains twice (minutes); checked here: the comparison and headline on
fabricated curves, our side read back from a ``metrics.jsonl``, the item order the peer is fed
(the loop's own), the settings carried over to TRL's ``GRPOConfig`` and the ones listed as not
aligned, and that the reward adapter gives TRL exactly the scores our workflow gives the same
completions. Tests that need TRL (the ``bench`` extra, which ``make setup`` installs) are skipped
without it, except under CI, where a missing TRL fails them rather than passing unseen.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from bench_vs_trl import (  # noqa: E402
    Side,
    compare,
    headline,
    merged_checks,
    parse_args,
    pooled,
    read_ours,
    tables,
)
from trl_settings import (  # noqa: E402
    FIXED_DIFFERENCES,
    SD_EPS_LINE,
    order_per_step,
    peer_settings,
    step_order,
)

IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false")
needs_trl = pytest.mark.skipif(
    importlib.util.find_spec("trl") is None and not IN_CI,
    reason="trl is not installed (the bench extra: make setup, or pip install -e '.[bench]')",
)


def _ours() -> Side:
    # Step 15 only ours evaluated: left out of the comparison.
    return Side(
        {0: 0.05, 5: 0.10, 10: 0.20, 15: 0.30}, {1: -0.5, 2: -0.4, 3: -0.3}, [6.0, 5.0, 7.0]
    )


def _trl() -> Side:
    return Side({0: 0.05, 5: 0.12, 10: 0.20}, {1: -0.6, 3: -0.2}, [2.0, 3.0, 2.5])


def test_compare_names_every_step_where_ours_is_below_and_the_median_speed_ratio():
    c = compare(_ours(), _trl())
    assert c.steps == [0, 5, 10]
    assert c.behind == [5]  # a tie (step 10) is not behind
    assert c.ratio == pytest.approx(6.0 / 2.5)
    assert not c.at_least_every and not c.not_slower


def test_compare_ahead_everywhere_and_faster():
    ours, trl = _ours(), _trl()
    trl.evals = {0: 0.05, 5: 0.09, 10: 0.19}
    trl.step_seconds = [9.0, 8.0, 7.5]
    c = compare(ours, trl)
    assert c.behind == [] and c.at_least_every
    assert c.ratio == pytest.approx(6.0 / 8.0) and c.not_slower
    line = headline(c, ours, trl, "grounding")
    assert line.startswith("headline: grounding, held-out greedy mean IoU at step 10")
    assert "ours >= TRL at every evaluation: yes" in line
    assert "ours s/step <= TRL's: yes (median 6.00 vs 8.00 s, ours/TRL 0.75x)" in line


def test_headline_says_where_ours_is_behind_and_that_it_is_slower():
    line = headline(compare(_ours(), _trl()), _ours(), _trl(), "counting")
    assert "held-out greedy accuracy at step 10 ours 0.200 vs TRL 0.200" in line
    assert "ours >= TRL at every evaluation: no, behind at step(s) 5" in line
    assert "ours s/step <= TRL's: no (median 6.00 vs 2.50 s, ours/TRL 2.40x)" in line


def test_compare_refuses_curves_without_a_common_step():
    trl = _trl()
    trl.evals = {3: 0.1}
    with pytest.raises(ValueError, match="no common evaluation step"):
        compare(_ours(), trl)


def test_tables_show_both_curves_their_difference_and_seconds():
    ours, trl = _ours(), _trl()
    ours.phases, trl.phases = {"rollout": 3.0}, {"generate": 1.0}
    ours.load, trl.load = (2.0, 3.5), (3.5, 1.0)
    held_out, per_step, phases, speed = tables(compare(ours, trl), ours, trl, "IoU")
    assert held_out.columns == ["step", "ours IoU", "TRL IoU", "ours - TRL"]
    assert held_out.rows == [
        ["0", "0.050", "0.050", "+0.000"],
        ["5", "0.100", "0.120", "-0.020"],
        ["10", "0.200", "0.200", "+0.000"],
    ]
    # Step 2 has no TRL reward logged: shown as "-", never as a number.
    assert per_step.rows[1] == ["2", "-0.400", "-", "5.00", "3.00"]
    assert phases.rows == [["ours", "rollout", "3.00"], ["TRL", "generate", "1.00"]]
    assert speed.rows == [
        ["ours", "6.00", "7.00", "0.0", "2.0 -> 3.5"],
        ["TRL", "2.50", "3.00", "0.0", "3.5 -> 1.0"],
    ]


def _seed(evals: dict[int, float], seconds: list[float], load: tuple[float, float]) -> Side:
    return Side(evals, {1: evals[0], 2: evals[5]}, seconds, {"update": seconds[0]}, 2.0, load)


def test_seeds_are_compared_by_their_means_with_each_seed_shown():
    # One seed of ours is behind TRL at step 5 and one is ahead: the means decide, and the
    # table shows both seeds so the reader sees the spread.
    ours = pooled(
        [
            _seed({0: 0.1, 5: 0.20}, [4.0, 6.0], (1.0, 2.0)),
            _seed({0: 0.1, 5: 0.32}, [5.0, 7.0], (2.0, 3.0)),
        ]
    )
    trl = pooled(
        [
            _seed({0: 0.1, 5: 0.25}, [7.0, 8.0], (3.0, 1.0)),
            _seed({0: 0.1, 5: 0.25}, [8.0, 9.0], (1.0, 1.5)),
        ]
    )
    assert ours.evals == pytest.approx({0: 0.1, 5: 0.26})
    assert ours.rewards == pytest.approx({1: 0.1, 2: 0.26})
    assert (
        ours.step_seconds == [4.0, 6.0, 5.0, 7.0] and ours.median_s == 5.5 and ours.worst_s == 7.0
    )
    assert ours.phases == {"update": 4.5} and ours.minutes == 4.0 and ours.load == (1.0, 3.0)
    comp = compare(ours, trl)
    assert comp.behind == [] and comp.ratio == pytest.approx(5.5 / 8.0)
    held_out, per_step, *_ = tables(comp, ours, trl, "IoU")
    assert held_out.columns[-2:] == ["ours per seed", "TRL per seed"]
    # The per-seed differences are -0.05 and +0.07: standard error 0.06.
    assert held_out.rows[1] == [
        "5",
        "0.260",
        "0.250",
        "+0.010",
        "0.060",
        "0.200 0.320",
        "0.250 0.250",
    ]
    assert "means over 2 seeds" in held_out.title
    # Per step: the seeds' mean reward and mean seconds of that step, never one seed's steps
    # listed after another's.
    assert [row[0] for row in per_step.rows] == ["1", "2"]
    assert per_step.rows == [
        ["1", "0.100", "0.100", "4.50", "7.50"],
        ["2", "0.260", "0.250", "6.50", "8.50"],
    ]
    assert "means over 2 seeds" in per_step.title
    line = headline(comp, ours, trl, "grounding")
    assert "mean IoU (mean of 2 seeds) at step 5 ours 0.260 vs TRL 0.250" in line
    assert "ours >= TRL at every evaluation: yes" in line


def _pooled(values: list[float]) -> Side:
    return pooled([Side({0: 0.1, 5: v}, {}, [1.0]) for v in values])


def test_behind_within_the_seed_spread_is_told_apart_from_behind_beyond_it():
    # Same seeds (same items) on both sides: the per-seed differences at step 5 are -0.08, +0.02
    # and -0.03, mean -0.03, standard error 0.029: behind, but not by two standard errors.
    ours, trl = _pooled([0.12, 0.22, 0.17]), _pooled([0.20, 0.20, 0.20])
    comp = compare(ours, trl)
    assert comp.behind == [5]
    mean, se = comp.paired[5]
    assert mean == pytest.approx(-0.03) and se == pytest.approx(0.05 / 3**0.5)
    assert comp.paired[0] == (0.0, 0.0) and comp.behind_beyond_spread == []
    line = headline(comp, ours, trl, "grounding")
    assert (
        "every evaluation: no, behind at step(s) 5 (by more than 2 standard errors of the "
        "per-seed difference at: none)" in line
    )
    held_out, *_ = tables(comp, ours, trl, "IoU")
    assert held_out.columns[4] == "standard error"
    assert held_out.rows[1][3:5] == ["-0.030", f"{0.05 / 3**0.5:.3f}"]
    assert "standard error of the per-seed differences" in held_out.title
    # Every seed behind by about the same: beyond the spread, and the headline names the step.
    ours = _pooled([0.17, 0.18, 0.16])
    comp = compare(ours, trl)
    assert comp.behind_beyond_spread == [5]
    assert "standard errors of the per-seed difference at: 5)" in headline(
        comp, ours, trl, "grounding"
    )


def test_one_seed_or_unequal_seed_counts_have_no_paired_difference():
    assert compare(_ours(), _trl()).paired == {}
    assert compare(_pooled([0.1, 0.2]), _pooled([0.1, 0.2, 0.3])).paired == {}
    assert "standard errors" not in headline(compare(_ours(), _trl()), _ours(), _trl(), "counting")


def test_pooling_keeps_only_the_steps_every_seed_has():
    a = Side({0: 0.1, 5: 0.2, 10: 0.3}, {1: 1.0, 2: 2.0}, [1.0])
    b = Side({0: 0.1, 5: 0.4}, {1: 3.0}, [2.0])
    p = pooled([a, b])
    assert sorted(p.evals) == [0, 5] and p.rewards == {1: 2.0}
    assert p.seed_evals == [a.evals, b.evals]
    assert pooled([a]) is a  # one seed: the run itself, and a table without per-seed columns
    held_out, *_ = tables(compare(a, a), a, a, "IoU")
    assert held_out.columns == ["step", "ours IoU", "TRL IoU", "ours - TRL"]


def test_check_lines_merge_across_seeds_and_split_where_they_differ():
    merged = merged_checks(
        {1: {"model": "equal", "evaluator": "equal at step 0"}, 2: {"model": "equal"}}
    )
    assert merged == {
        "model": "equal",
        "evaluator (seed 1)": "equal at step 0",
        "evaluator (seed 2)": "not checked",
    }


def test_seeds_come_from_seeds_and_a_seed_override_is_refused(capsys):
    assert parse_args(["--recipe", "counting"]).seeds == [1, 2, 3]
    assert parse_args(["--quick"]).seeds == [1]
    assert parse_args(["--seeds", "4", "5"]).seeds == [4, 5]
    with pytest.raises(SystemExit) as exc:
        parse_args(["--recipe", "counting", "seed=2"])
    assert exc.value.code == 2
    assert "give seeds with --seeds, not a seed=N override" in capsys.readouterr().err


def test_both_sides_are_evaluated_on_the_test_split_unless_dev_is_asked_for(capsys):
    from bench_learning import train_overrides
    from splits import SPLITS

    # TRL's side reads its held-out items from the config these overrides build.
    assert parse_args([]).split == "test"
    assert f"vlrollout.eval_seed={SPLITS['test']}" in train_overrides(parse_args([]))
    assert "vlrollout.eval_seed=200" in train_overrides(parse_args(["--split", "dev"]))
    with pytest.raises(SystemExit) as exc:
        parse_args(["vlrollout.eval_seed=5"])
    assert exc.value.code == 2 and "--split" in capsys.readouterr().err
    line = headline(compare(_ours(), _trl()), _ours(), _trl(), "counting", "test")
    assert line.endswith(f"; on the test split (eval_seed {SPLITS['test']})")


def test_the_grounding_record_is_on_the_test_split_with_paired_seeds():
    from splits import SPLITS

    rec = json.loads((REPO / "bench" / "results" / "vs_trl_grounding.json").read_text())
    numbers = rec["numbers"]
    assert numbers["split"] == "test" and numbers["eval_seed"] == SPLITS["test"] != SPLITS["dev"]
    assert f"vlrollout.eval_seed={SPLITS['test']}" in numbers["overrides"]
    seeds = len(numbers["seeds"])
    assert seeds >= 4 and len(numbers["ours_per_seed"]) == len(numbers["trl_per_seed"]) == seeds
    # Both sides start from the same weights on the same items: one step-0 score.
    assert numbers["ours"]["evals"]["0"] == numbers["trl"]["evals"]["0"]
    assert rec["headline"].endswith(f"on the test split (eval_seed {SPLITS['test']})")


def test_read_ours_takes_seconds_in_step_order_and_phase_means(tmp_path):
    rows = [
        {"step": s, "reward_mean": r, "time/step": t, "time/rollout": t / 2, "time/logp": 0.0}
        | {"time/update": t / 4, "time/weight_sync": 0.1}
        for s, r, t in [(2, -0.2, 4.0), (1, -0.3, 8.0)]
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    side = read_ours(tmp_path, {0: 0.1}, 1.5)
    assert side.step_seconds == [8.0, 4.0]
    assert side.rewards == {1: -0.3, 2: -0.2}
    assert side.phases == pytest.approx(
        {"rollout": 3.0, "logp": 0.0, "update": 1.5, "weight_sync": 0.1}
    )
    assert side.median_s == 6.0 and side.worst_s == 8.0


def test_step_order_is_the_loops_items_per_step_each_repeated_in_a_row():
    from vlrollout.train.data import batch_items

    items, bs, group, seed = list(range(8)), 4, 3, 7
    order = step_order(len(items), 5, bs, seed, group)  # 5 steps: past two epochs
    steps = order_per_step(order, bs * group)
    assert len(steps) == 5
    for step, got in enumerate(steps):
        want = batch_items(items, step, bs, seed)
        assert got == [j for j in want for _ in range(group)]
    assert steps[0] != steps[2]  # a fresh permutation per epoch
    assert step_order(8, 5, bs, seed + 1, group) != order


def _cfg(tmp_path: Path, *overrides: str):
    from vlrollout.train.config import load_config

    return load_config(
        str(REPO / "examples" / "train_grounding.yaml"),
        [f"vlrollout.output={tmp_path / 'out'}", *overrides],
    )


def test_peer_settings_carry_the_recipe_over(tmp_path):
    cfg = _cfg(tmp_path)
    s = peer_settings(cfg, 30)
    k = s.kwargs
    group, items = cfg.gconfig.n_samples, cfg.train_dataset.batch_size
    assert (k["num_generations"], k["per_device_train_batch_size"]) == (group, items * group)
    assert k["gradient_accumulation_steps"] == 1 and k["num_iterations"] == 1
    assert k["max_steps"] == 30 and k["max_completion_length"] == cfg.gconfig.max_new_tokens
    assert k["temperature"] == cfg.gconfig.temperature and k["top_k"] == 0
    assert k["learning_rate"] == cfg.actor.optimizer.lr
    assert k["max_grad_norm"] == cfg.actor.optimizer.gradient_clipping
    assert k["epsilon"] == cfg.actor.eps_clip and k["beta"] == 0.0
    assert k["loss_type"] == "dapo" and k["scale_rewards"] == "none"  # the recipe's Dr. GRPO
    assert k["bf16"] is False and k["gradient_checkpointing"] is False
    # The recipe trains every group of the step, as TRL does: only the differences no setting
    # removes are left.
    assert s.not_aligned == FIXED_DIFFERENCES


def test_a_training_setting_of_ours_is_listed_as_one_the_peer_lacks(tmp_path):
    s = peer_settings(_cfg(tmp_path, "vlrollout.dynamic_sampling=true"), 4)
    assert s.not_aligned == [
        "vlrollout.dynamic_sampling=True: a vlrollout train setting the peer does not have",
        *FIXED_DIFFERENCES,
    ]


def test_peer_settings_list_what_trl_cannot_reproduce(tmp_path):
    cfg = _cfg(tmp_path, "actor.kl_ctl=0.1", "actor.ppo_n_minibatches=2")
    s = peer_settings(cfg, 4)
    extra = [line for line in s.not_aligned if line not in FIXED_DIFFERENCES]
    assert len(extra) == 2
    assert extra[0].startswith("KL: AReaL kl_ctl=0.1") and "ppo_n_minibatches 2" in extra[1]
    assert s.kwargs["beta"] == 0.0


def test_dr_grpo_advantages_are_carried_over_and_other_norms_are_listed(tmp_path):
    s = peer_settings(_cfg(tmp_path, "actor.reward_norm.std_level=null"), 4)
    assert s.kwargs["scale_rewards"] == "none" and s.not_aligned == FIXED_DIFFERENCES
    assert any("scale_rewards 'none'" in line for line in s.aligned)
    s = peer_settings(_cfg(tmp_path, "actor.reward_norm.std_level=group"), 4)
    assert s.kwargs["scale_rewards"] == "group"
    assert s.not_aligned == [SD_EPS_LINE, *FIXED_DIFFERENCES]  # only when both divide by the sd
    assert any("group-normalised reward" in line for line in s.aligned)
    leave_one_out = _cfg(tmp_path, "actor.reward_norm.std_level=null")
    leave_one_out.actor.reward_norm.mean_leave1out = True  # the recipe file does not list the key
    batch_mean = _cfg(tmp_path, "actor.reward_norm.mean_level=batch")
    for cfg in (batch_mean, leave_one_out):
        s = peer_settings(cfg, 4)
        extra = [line for line in s.not_aligned if line not in FIXED_DIFFERENCES]
        assert len(extra) == 1 and extra[0].startswith("reward_norm ("), extra
        assert s.kwargs["scale_rewards"] == "group"


@needs_trl
def test_grpo_config_accepts_the_settings_as_one_generation_per_step(tmp_path):
    from trl import GRPOConfig

    cfg = _cfg(tmp_path)
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), **peer_settings(cfg, 3).kwargs)
    group, items = cfg.gconfig.n_samples, cfg.train_dataset.batch_size
    assert args.generation_batch_size == items * group and args.steps_per_generation == 1
    assert args.use_cpu and args.max_steps == 3


@needs_trl
def test_reward_adapter_gives_trl_exactly_our_workflows_scores(tmp_path):
    """Completions scored by our workflow (a scripted engine answering them) and by TRL's own
    reward call (``GRPOTrainer._calculate_rewards`` with the dataset rows it would pass) agree
    exactly, item by item; the scores differ from one another, so a mix-up would show."""
    from accelerate import PartialState
    from trl import GRPOTrainer
    from trl_peer import RewardAdapter, trl_rows

    from vlrollout.testing.scripted_engine import ScriptedEngine
    from vlrollout.tiny.synthetic import generate_items
    from vlrollout.train.rewards import build_rewards
    from vlrollout.workflows import VisionRLVRWorkflow
    from vlrollout.workflows.preparation import load_processor

    cfg = _cfg(tmp_path)
    items = generate_items("ground", 2, 100) + generate_items("count", 2, 100)
    reward, _ = build_rewards("tiny_task", "giou", items, items)
    processor = load_processor(str(REPO / "assets" / "tiny-qwen2vl"))
    tok = processor.tokenizer
    one = dataclasses.replace(cfg.gconfig, n_samples=1)
    workflow = VisionRLVRWorkflow(reward, one, tok, processor)
    stop = tok.convert_tokens_to_ids("<|im_end|>")
    texts = [
        (0, items[0]["solution"]),
        (0, "<|box_start|>(100,100),(600,700)<|box_end|>"),
        (1, items[1]["solution"]),
        (1, items[0]["solution"]),  # item 0's box for item 1
        (2, items[2]["solution"]),
        (3, str(int(items[3]["solution"]) + 1)),
    ]
    completions = [tok.encode(t, add_special_tokens=False) + [stop] for _, t in texts]

    async def ours() -> list[float]:
        scores = []
        for (index, _), ids in zip(texts, completions, strict=True):
            engine = ScriptedEngine([ids], stop_token_ids=[stop])
            traj = await workflow.arun_episode(engine, items[index])
            scores.append(float(traj["rewards"].flatten()[0]))
        return scores

    expected = asyncio.run(ours())
    assert len(set(expected)) >= 4, expected  # the cases tell items and boxes apart

    rows = trl_rows(items)
    inputs = [{k: rows[k][i] for k in rows} for i, _ in texts]
    adapter = RewardAdapter(VisionRLVRWorkflow(reward, one, tok, processor), items)
    trainer = SimpleNamespace(
        accelerator=SimpleNamespace(device="cpu", is_main_process=True),
        reward_funcs=[adapter],
        reward_processing_classes=[None],
        reward_func_names=[adapter.__name__],
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(report_to=[]),
        environments=None,
        _log_completion_extra=lambda *a: None,
        _log_metric=lambda *a: None,
    )
    PartialState()  # TRL logs through accelerate (a reward of None is warned about)
    prompts = [row["prompt"] for row in inputs]
    decoded = [[{"role": "assistant", "content": tok.decode(c)}] for c in completions]
    got = GRPOTrainer._calculate_rewards(trainer, inputs, prompts, decoded, completions)
    assert got[:, 0].tolist() == pytest.approx(expected, abs=0, rel=1e-6)
    assert adapter.calls == [[i for i, _ in texts]] and not adapter.rejected


def test_trl_rows_refuse_a_message_they_would_reorder():
    from trl_peer import trl_rows

    item = {
        "id": "x",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]}
        ],
        "images": ["a.png"],
    }
    with pytest.raises(ValueError, match="images before the user text"):
        trl_rows([item])
    item["messages"][0]["content"].reverse()
    assert trl_rows([item])["prompt"] == [[{"role": "user", "content": "Hi"}]]


def test_a_vlrollout_training_key_away_from_its_default_is_listed_as_not_aligned():
    """A learning lever added to the ``vlrollout`` section later (here a made-up one) is named
    without this benchmark knowing it; the shared data and evaluation keys are not."""
    from trl_settings import changed_train_settings

    from vlrollout.train.config import TrainSection

    @dataclasses.dataclass
    class Section(TrainSection):
        lever: int = 0

    assert changed_train_settings(Section(eval_items=8, task="count")) == {}
    assert changed_train_settings(Section(lever=3, eval_items=8)) == {"lever": 3}


def test_our_sampled_reward_under_dynamic_sampling_is_every_episodes(tmp_path):
    """Dynamic sampling trains only groups whose rewards differ, so their mean sits near the
    middle of a 0/1 reward; the curve beside TRL's is the mean of every episode rolled out."""
    times = {k: 1.0 for k in ("time/rollout", "time/logp", "time/update", "time/weight_sync")}
    rows = [
        {"step": 1, "reward_mean": 0.5, "dynamic/reward_mean_all": 0.9, "time/step": 4, **times},
        {"step": 2, "reward_mean": 0.25, "time/step": 4, **times},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    side = read_ours(tmp_path, {0: 0.5}, 1.0)
    assert side.rewards == {1: 0.9, 2: 0.25}
