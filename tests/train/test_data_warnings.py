"""The warning for a training row that cannot be an item reads as ``validate-data`` prints it."""

from __future__ import annotations

import logging

from tests.records import Records
from vlrollout.datasets import LOAD_ERROR
from vlrollout.train import data


def test_an_unreadable_row_is_skipped_with_its_reason_and_detail_in_words():
    bad = {"id": "line-4", LOAD_ERROR: {"reason": "bad_json", "detail": "not valid JSON (x)"}}
    good = {"id": "ok", "messages": []}
    with Records(data.logger, logging.WARNING) as warnings:
        kept = data.readable_items("train.jsonl", [bad, good])
    assert kept == [good]
    assert warnings.text.strip() == "train.jsonl line-4 skipped: bad_json: not valid JSON (x)"
