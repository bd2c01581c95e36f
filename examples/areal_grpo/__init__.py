"""GRPO with AReaL's own trainer and vlrollout's vision workflow (see README.md here).

A package so that AReaL's workers can import ``examples.areal_grpo.config`` (the experiment
config class travels to them by import path) and ``examples.areal_grpo.rewards`` (rewards travel
by import path too). Run from the repository root.
"""
