"""Misuse of the smaller commands (snapshot, make-samples, train-tiny): one message naming the
value, exit 2, no traceback, as for `vlrollout run`."""

from __future__ import annotations

import pytest

from vlrollout import cli


def _status(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as e:  # argparse's own usage errors
        return int(e.code)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["snapshot", "--processor", "offline:nope", "--data", "x.jsonl", "--out", "s.json"],
            "--processor 'offline:nope': no offline builder for family 'nope'",
        ),
        (
            [
                "snapshot",
                "--processor",
                "offline:qwen2_vl",
                "--data",
                "assets/samples/data.jsonl",
                "--out",
                "/proc/no/s.json",
            ],
            "cannot write --out /proc/no/s.json",
        ),
        (["make-samples", "-n", "-3", "--out", "OUT"], "-n: must be at least 0, got -3"),
        (["train-tiny", "--steps", "-1", "--out", "OUT"], "--steps: must be at least 0, got -1"),
    ],
)
def test_misuse_is_one_message_and_exit_2(argv, expected, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(cli.__file__.rsplit("/vlrollout/", 1)[0])  # the checkout: sample data
    out = tmp_path / "out"  # a command that wrongly runs writes here, not into the checkout
    status = _status([str(out) if a == "OUT" else a for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert expected in err, err
    assert "Traceback" not in err
    assert f"vlrollout {argv[0]}" in err  # the command is named, not just `vlrollout`
