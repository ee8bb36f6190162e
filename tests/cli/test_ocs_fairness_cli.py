"""``trainfabric ocs fairness``: the JSON contract and bad input (exit 2, one line naming the
option), run in-process."""

import math

import pytest


def test_fairness_json_reports_every_p(cli):
    code, stdout, stderr = cli(
        "ocs", "fairness", "--jobs", "moe,pipeline", "--pods", "6", "--job-pods", "4,6",
        "--weights", "1,2", "--p", "1,4,inf", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    from trainfabric.io import loads

    res = loads(stdout)
    assert [r["p"] for r in res["plans"]] == [1.0, 4.0, "inf"]
    assert [j["weight"] for j in res["jobs"]] == [1.0, 2.0]
    assert [len(j["pods"]) for j in res["jobs"]] == [4, 6]
    for row in res["plans"]:
        times = row["job_iteration_s"]
        assert len(times) == 2 and all(t > 0 for t in times)
        assert row["max"] == pytest.approx(max(times))  # raw seconds by default
        w = [1.0, 2.0]
        assert row["mean"] == pytest.approx((w[0] * times[0] + w[1] * times[1]) / 3)
        y = [1 / t for t in times]
        assert row["jain"] == pytest.approx(sum(y) ** 2 / (2 * sum(v * v for v in y)))
        if row["p"] != "inf":
            chk = row["alpha_fair"]
            assert chk["alpha"] == row["p"] + 1 and chk["agree"] and chk["kkt"]
            assert chk["rel_objective"] <= 1e-6 and chk["rel_wiring"] <= 1e-6
    assert res["unregularised_max_non_increasing"]
    assert set(res["trade_off"]) >= {"mean_decreases", "max_increases"}
    for base in res["baselines"].values():
        assert math.isfinite(base["max"])


BAD = [
    (["--p", "0.5"], "--p"),
    (["--p", "nan"], "--p"),
    (["--p", "two"], "--p"),
    (["--p", "1,,2"], "--p"),
    (["--p", "1e9"], "--p"),  # beyond 1e8: inf to solver tolerance
    (["--p", "1e308"], "--p"),
    (["--weights", "1,-1"], "--weights"),
    (["--weights", "1,x"], "--weights"),
    (["--weights", "1"], "--weights"),
    (["--job-pods", "4"], "--job-pods"),
    (["--job-pods", "4,9"], "--job-pods"),
    (["--job-pods", "4,1"], "--job-pods"),
    (["--jobs", "moe,nosuch"], "--jobs"),
    (["--jobs", ""], "--jobs"),
    (["--ports", "3", "--ocs", "2"], "--ocs"),
    (["--b1", "0"], "--b1"),
    (["--pods", "1"], "--pods"),
]


@pytest.mark.parametrize(("argv", "option"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_naming_the_option(cli, argv, option):
    code, stdout, stderr = cli("ocs", "fairness", *argv, "--json")
    lines = stderr.strip().splitlines()
    assert code == 2 and stdout == "" and len(lines) == 1, stderr
    assert lines[0].startswith((f"error: {option}: ", f"error: Invalid value for '{option}': ")), (
        lines[0]
    )


def test_a_dag_file_keeps_its_pods(cli, tmp_path):
    path = tmp_path / "pipe.json"
    assert cli("workloads", "export", "pipeline", str(path), "--pods", "4")[0] == 0
    jobs = f"moe,{path}"
    code, stdout, stderr = cli(
        "ocs", "fairness", "--jobs", jobs, "--pods", "6", "--job-pods", "4,4", "--p", "2",
        "--no-alpha-check", "--json",
    )  # fmt: skip
    assert code == 0, stderr
    from trainfabric.io import loads

    assert [len(j["pods"]) for j in loads(stdout)["jobs"]] == [4, 4]
    code, stdout, stderr = cli(
        "ocs", "fairness", "--jobs", jobs, "--pods", "6", "--job-pods", "4,5", "--json"
    )  # fmt: skip
    assert code == 2 and stderr.startswith("error: --job-pods: "), stderr


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_alpha_check_runs_by_default_only_on_small_fabrics(cli, monkeypatch):
    """Default: the dense α-fair check runs up to ALPHA_CHECK_PAIRS pod pairs; above, it is
    skipped (JSON says so) unless --alpha-check forces it."""
    from trainfabric.io import loads
    from trainfabric.ocs.cli import fairness as cli_fairness

    argv = ("ocs", "fairness", "--jobs", "moe,pipeline", "--pods", "6", "--p", "2", "--json")
    small = loads(cli(*argv)[1])
    assert small["alpha_check"] is True and "alpha_fair" in small["plans"][0]
    monkeypatch.setattr(cli_fairness, "ALPHA_CHECK_PAIRS", 14)  # 6 pods have 15 pairs
    skipped = loads(cli(*argv)[1])
    assert skipped["alpha_check"] is False and "alpha_fair" not in skipped["plans"][0]
    forced = loads(cli(*argv, "--alpha-check")[1])
    assert forced["alpha_check"] is True and "alpha_fair" in forced["plans"][0]
