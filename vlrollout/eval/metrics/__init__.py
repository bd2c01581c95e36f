"""Benchmark metrics, each computed the way the published evaluation computes it.

- :mod:`.boxes`: referring-expression grounding (IoU, ACC@t, Center_ACC) as lmms-eval's
  ``refcoco_bbox_rec`` scores it, after reading the model family's own box convention;
- :mod:`.captions`: corpus BLEU-1..4, ROUGE-L and CIDEr-D as pycocoevalcap 1.2 computes them over a
  split, on text tokenised as its (Java) PTB tokenizer does;
- :mod:`vlrollout.rewards.vqa_answers`: the VQA answer normalisation and accuracy (beside the
  choice reward that reads option text with it), exact match for counts and choices.

The tasks of :mod:`vlrollout.eval.tasks` turn completions into per-item values with these functions
and aggregate them; ``docs/eval_metrics.md`` lists every formula and what it is tested against.
"""
