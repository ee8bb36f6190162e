"""`trainfabric workloads ...` end to end: JSON keys, files in place of presets, exit code 2."""

import json

import pytest

from trainfabric.io import loads


def test_show_json_has_required_keys(cli):
    code, out, _ = cli("workloads", "show", "gpt3-175b", "--json")
    assert code == 0
    s = loads(out)
    assert {"nodes", "edges", "comm_bytes", "phases"} <= set(s)
    assert s["pods"] == 64 and s["job"]["params"] == 174_563_733_504


def test_export_then_show_file_agrees(cli, tmp_path):
    f = tmp_path / "pipe.json"
    assert cli("workloads", "export", "pipeline", str(f), "--pods", "8")[0] == 0
    a = loads(cli("workloads", "show", "pipeline", "--pods", "8", "--json")[1])
    b = loads(cli("workloads", "show", str(f), "--json")[1])
    for key in ("nodes", "edges", "comm_bytes", "phases", "critical_path_s"):
        assert a[key] == pytest.approx(b[key]), key
    t = tmp_path / "pipe_tm.json"
    assert cli("workloads", "export", "pipeline", str(t), "--traffic")[0] == 0
    c = loads(cli("workloads", "show", str(t), "--json")[1])
    assert c["comm_bytes"] == pytest.approx(
        loads(cli("workloads", "show", "pipeline", "--json")[1])["comm_bytes"]
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("workloads", "show", "nope"), "WORKLOAD: unknown preset"),
        (("workloads", "show", "gpt3-175b", "--pods", "7"), "pods:"),
        (("workloads", "show", "moe", "--rate-gbps", "0"), "--rate-gbps"),
        (("workloads", "show", "missing.json"), "file not found"),
    ],
)
def test_user_errors_exit_2_with_one_line(cli, argv, needle):
    code, out, err = cli(*argv)
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_config_file_supplies_options_and_rejects_unknown_keys(cli, tmp_path):
    good = tmp_path / "c.toml"
    good.write_text("rate-gbps = 400\npods = 8\n")
    s = loads(cli("workloads", "show", "dp-ring", "--config", str(good), "--json")[1])
    assert s["rate_bps"] == 400e9 and s["pods"] == 8
    bad = tmp_path / "b.toml"
    bad.write_text("rate_gbs = 1\n")
    code, _, err = cli("workloads", "show", "moe", "--config", str(bad))
    assert code == 2 and "--config: unknown option 'rate_gbs'" in err


def test_help_lists_the_groups(cli):
    code, out, _ = cli("--help")
    assert code == 0
    for group in ("workloads", "ocs", "fabric", "diloco", "sweep", "report", "demo"):
        assert group in out


def test_a_file_field_is_not_renamed_to_an_option(cli, tmp_path):
    """The file's ``pods`` is not the ``--pods`` option: the error names the file's field."""
    doc = {"format": "trainfabric.traffic", "version": 1, "pods": 0, "phases": []}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    code, _, err = cli("workloads", "show", str(path))
    assert code == 2 and "error: pods: " in err and "--pods" not in err and str(path) in err
