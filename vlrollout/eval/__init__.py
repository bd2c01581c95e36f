"""Benchmark evaluation: a dataset scored the way the leaderboards score it.

``vlrollout eval`` (:mod:`vlrollout.eval.main`) runs a model, or any OpenAI-compatible server, over
items read by :mod:`vlrollout.readers`, and scores the completions with a task of
:mod:`vlrollout.eval.tasks` (referring-expression grounding, captioning, counting, multiple choice,
short answers); ``vlrollout train`` runs the same evaluator on its held-out items.
"""
