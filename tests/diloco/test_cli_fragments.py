"""``diloco sim --fragments``: the fragment model from the command line, bad input refused in
one line naming the flag."""

import pytest

from trainfabric.io import loads

SIM = ("diloco", "sim", "--policy", "wa_forecast", "--regime", "bursty", "--windows", "600")


def test_sim_fragments_json(cli):
    """Per-fragment counts summing to the syncs; a fragment sync moves a quarter of the
    payload and is shorter than the whole model's."""
    code, text, err = cli(*SIM, "--fragments", "4", "--json")
    assert code == 0, err
    row = loads(text)
    whole = loads(cli(*SIM, "--json")[1])
    assert row["fragments"] == 4 and len(row["fragment_syncs"]) == 4
    assert sum(row["fragment_syncs"]) == row["syncs"] > whole["syncs"]
    assert row["sync_payload_bytes"] == whole["sync_payload_bytes"] / 4
    assert row["sync_s"] < whole["sync_s"]
    assert whole["fragment_syncs"] == [whole["syncs"]]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("--fragments", "0"), "--fragments"),
        (("--fragments", "65"), "--fragments"),
        (("--fragments", "2", "--stagger-steps", "0"), "--stagger-steps"),
        (("--fragments", "2", "--regime", "seed_bursty"), "--fragments"),
    ],
)
def test_sim_bad_fragments_name_the_flag(cli, args, flag):
    code, text, err = cli(*SIM[:6], "--windows", "100", *args)
    assert code == 2 and text == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0], err
