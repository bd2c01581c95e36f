"""``vlrollout train``: GRPO with AReaL's own ``FSDPPPOActor`` over the embedded engine.

A recipe (it wires components; no component imports it):

- :mod:`~vlrollout.train.cpu`: CPU-safe trainer defaults where there is no GPU.
- :mod:`~vlrollout.train.packing`: keeps packed sequences apart without flash-attn;
  :mod:`~vlrollout.train.packed_attention`: attends within each of them, not over the row.
- :mod:`~vlrollout.train.grouping`: whole GRPO groups per micro-batch (a group's image encoded
  once, :mod:`vlrollout.image_sharing`).
- :mod:`~vlrollout.train.actor`: builds AReaL's actor (world size 1, or a torchrun rank).
- :mod:`~vlrollout.train.batch`: per-trajectory images after ``compute_advantages``.
- :mod:`~vlrollout.train.config`, :mod:`~vlrollout.train.rewards`: config and rewards.
- :mod:`~vlrollout.train.data`: training and held-out items, and the items of each step.
- :mod:`~vlrollout.train.rollout_engine`: the engine rollouts run on, and weight updates to it.
- :mod:`~vlrollout.train.session`: a run set up (actor, engine, workflows, resume point);
  :mod:`~vlrollout.train.step`: one GRPO step; :mod:`~vlrollout.train.loop`: the steps with
  evaluations and checkpoints between them.
- :mod:`~vlrollout.train.evaluation`: held-out evaluation; :mod:`~vlrollout.train.stats`: the
  numbers of each step; :mod:`~vlrollout.train.checkpoint`: resumable checkpoints;
  :mod:`~vlrollout.train.report`: the HTML report; :mod:`~vlrollout.train.main`: the command
  line.
"""
