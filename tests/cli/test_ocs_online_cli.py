"""``trainfabric ocs online``: regret and its bound as JSON for generators and files; bad input
exits 2 with one line naming the option (in-process, plus one subprocess for the exit path)."""

import subprocess
import sys

import numpy as np
import pytest

from trainfabric.ocs import traffic as tr


def test_threshold_json_reports_regret_below_its_bound(cli, strict_loads):
    code, out, _ = cli(
        "ocs", "online", "--traffic", "moe-phases", "--slots", "400", "--pods", "8",
        "--ports", "4", "--ocs", "2", "--v1", "2e9", "--switch-cost-s", "0.05", "--json",
    )  # fmt: skip
    assert code == 0
    res = strict_loads(out)
    assert res["policy"] == "threshold" and res["slots"] == 400 and res["pods"] == 8
    assert res["v1"] == pytest.approx(2e9, rel=1e-9)
    assert res["gamma_s_per_byte"] == pytest.approx(8 / 5e9)
    assert res["theta"] == pytest.approx(res["theta_star"])
    assert 0 <= res["regret_s"] <= res["regret_bound_s"]
    assert res["switches"] <= res["switches_bound"]
    assert res["regret_always_s"] == pytest.approx(0.05 * 400, rel=1e-9)


@pytest.mark.parametrize(
    "policy",
    ["always", "never", "oracle", "glr", "online-balance", "online-learned"]
    + [pytest.param("glr-calibrated", marks=pytest.mark.slow)],  # 8-10 s: it calibrates
)
def test_every_policy_runs(cli, strict_loads, policy):
    code, out, _ = cli(
        "ocs", "online", "--traffic", "job-arrival", "--slots", "300", "--pods", "6",
        "--ports", "4", "--ocs", "2", "--policy", policy, "--charge", "per-circuit", "--json",
    )  # fmt: skip
    assert code == 0
    res = strict_loads(out)
    assert res["policy"] == policy and res["charge"] == "per-circuit"
    assert res["switching_cost_s"] == pytest.approx(res["switch_cost_s"] * res["moved_circuits"])


def test_file_input_npy_and_csv(cli, strict_loads, tmp_path):
    d = tr.generate("jumps", 50, 1e9, pods=5, seed=1, jumps=3).array()
    np.save(tmp_path / "seq.npy", d)
    t, i, j = np.nonzero(d)
    rows = ["slot,src,dst,bytes"] + [
        f"{a},{b},{c},{float(d[a, b, c])!r}" for a, b, c in zip(t, i, j, strict=True)
    ]
    (tmp_path / "seq.csv").write_text("\n".join(rows) + "\n")
    results = []
    for name in ("seq.npy", "seq.csv"):
        code, out, _ = cli(
            "ocs", "online", "--traffic", str(tmp_path / name), "--ports", "4", "--ocs", "2",
            "--switch-cost-s", "0.01", "--json",
        )  # fmt: skip
        assert code == 0
        results.append(strict_loads(out))
    assert results[0]["regret_s"] == results[1]["regret_s"]
    assert results[0]["v1"] == pytest.approx(1e9, rel=1e-9) and results[0]["pods"] == 5


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--traffic", "wobble"], "--traffic"),
        (["--policy", "sometimes"], "--policy"),
        (["--charge", "per-bit"], "--charge"),
        (["--traffic", "jumps", "--v1", "1e16"], "--v1"),
        (["--v1", "-1"], "--v1"),
        (["--switch-cost-s", "nan"], "--switch-cost-s"),
        (["--ports", "6", "--ocs", "4"], "--ocs"),
        (["--slots", "1"], "--slots"),
        (["--theta", "-3"], "--theta"),
        (["--traffic", "jumps", "--jumps", "5000", "--slots", "100"], "--jumps"),
        (["--traffic", "/nonexistent/seq.npy"], "--traffic"),
        (["--pods", "4096", "--slots", "10000000"], "--slots"),  # work guard, refused at once
    ],
)
def test_bad_input_exits_2_naming_the_option(cli, args, option):
    code, out, err = cli("ocs", "online", "--slots", "100", "--pods", "4", *args, "--json")
    assert code == 2, err
    assert option in err and out == ""


def test_bad_file_and_pods_mismatch_name_the_option(cli, tmp_path):
    f = tmp_path / "bad.csv"
    f.write_text("slot,src,dst,bytes\n0,0,1,5\n0,1,0,-2\n")
    code, _, err = cli("ocs", "online", "--traffic", str(f), "--json")
    assert code == 2 and "--traffic" in err and "line 3" in err
    np.save(tmp_path / "ok.npy", np.ones((3, 4, 4)))
    code, _, err = cli("ocs", "online", "--traffic", str(tmp_path / "ok.npy"), "--pods", "5")
    assert code == 2 and "--pods" in err


def test_real_exit_path_is_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "trainfabric.cli", "ocs", "online", "--charge", "often"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--charge" in proc.stderr
    assert proc.stdout == ""


def test_churn_report_splits_reconfigurations_onto_the_ocses(cli, strict_loads):
    code, out, _ = cli(
        "ocs", "online", "--traffic", "moe-phases", "--slots", "300", "--pods", "8",
        "--ports", "4", "--ocs", "2", "--v1", "2e10", "--charge", "per-circuit", "--churn",
        "--json",
    )  # fmt: skip
    assert code == 0
    res = strict_loads(out)
    assert res["wiring_changes"] >= 1
    assert res["moved_circuits"] <= res["cross_connects_added_aware"]
    assert res["cross_connects_added_aware"] <= res["cross_connects_added_naive"]
    extra = res["switch_cost_s"] * (res["cross_connects_added_aware"] - res["moved_circuits"])
    assert res["regret_cross_connects_s"] == pytest.approx(res["regret_s"] + extra)


def test_directory_as_traffic_is_named_a_directory(cli, tmp_path):
    code, _, stderr = cli("ocs", "online", "--traffic", str(tmp_path), "--json")
    assert code == 2 and stderr.strip().endswith("is a directory, not a file"), stderr


def _csv_with_row(tmp_path, row: str):
    """A valid 2-slot, 3-pod slot,src,dst,bytes CSV with ``row`` appended (line 6)."""
    f = tmp_path / "seq.csv"
    f.write_text("slot,src,dst,bytes\n0,0,1,5\n0,1,2,5\n1,0,1,7\n1,2,0,3\n" + row + "\n")
    return f


@pytest.mark.parametrize(
    ("row", "what"),
    [
        ("10000000000000000000,0,2,7", "slot must be below 2^53"),
        ("0,1e30,2,7", "src must be below 2^53"),
        ("0,0,2,1e308", "bytes must be at most 1e+30"),  # used to blame --switch-cost-s
    ],
)
def test_huge_ids_and_bytes_in_a_csv_name_the_traffic_line(cli, tmp_path, row, what):
    f = _csv_with_row(tmp_path, row)
    code, out, err = cli("ocs", "online", "--traffic", str(f), "--ports", "2", "--ocs", "1")
    assert code == 2 and out == "", err
    assert err.startswith("error: --traffic: ") and "line 6" in err and what in err, err
    assert len(err.strip().splitlines()) == 1


def test_empty_npy_is_named_not_an_interrupt(cli, tmp_path):
    f = tmp_path / "empty.npy"
    f.write_bytes(b"")
    code, _, err = cli("ocs", "online", "--traffic", str(f), "--ports", "2", "--ocs", "1")
    assert code == 2 and err.startswith("error: --traffic: ") and "not a NumPy array" in err, err


def test_moe_phases_on_two_pods_names_the_pods_not_the_default_v1(cli):
    code, _, err = cli("ocs", "online", "--traffic", "moe-phases", "--pods", "2", "--slots", "50")
    assert code == 2 and err.startswith("error: --pods: ") and "--v1" not in err, err
    code, _, err = cli("ocs", "online", "--traffic", "moe-phases", "--pods", "3", "--slots", "50")
    assert code == 0, err
