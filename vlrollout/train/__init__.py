"""``vlrollout train``: GRPO with AReaL's own ``FSDPPPOActor`` over the embedded engine.

A recipe (it wires components; no component imports it): :mod:`vlrollout.train.cpu` picks
CPU-safe defaults, :mod:`vlrollout.train.packing` keeps packed sequences apart without
flash-attn, :mod:`vlrollout.train.actor` builds AReaL's actor, :mod:`vlrollout.train.loop` runs
the GRPO steps, :mod:`vlrollout.train.report` writes the metrics and the HTML report.
"""
