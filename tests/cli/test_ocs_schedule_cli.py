"""``trainfabric ocs schedule``: the issue's JSON contract and bad input (exit 2, one line
naming the option), run in-process."""

import numpy as np
import pytest

from trainfabric.io import loads

SCHEDULERS = {"bvn+lpt", "solstice+lpt", "eclipse+lpt", "spectra-like", "ours"}


def test_issue_command_prints_makespan_bound_and_every_scheduler(cli):
    code, stdout, stderr = cli(
        "ocs", "schedule", "--demand", "moe", "--pods", "32", "--ocs", "4", "--delay-us", "20",
        "--json",
    )  # fmt: skip
    assert code == 0, stderr
    res = loads(stdout)
    assert res["pods"] == 32 and res["ocs"] == 4 and res["delay_s"] == pytest.approx(20e-6)
    rows = {r["scheduler"]: r for r in res["schedulers"]}
    assert set(rows) == SCHEDULERS
    assert res["makespan_s"] == rows["ours"]["makespan_s"]
    assert res["lower_bound_s"] == max(res["lower_bound_parts_s"].values())
    for r in rows.values():
        assert r["makespan_s"] >= res["lower_bound_s"] * (1 - 1e-9)
        assert r["over_lb"] == pytest.approx(r["makespan_s"] / res["lower_bound_s"])
        assert r["configurations"] >= 31  # a dense all-to-all row needs 31 configurations


def test_matrix_file_and_table_view(cli, tmp_path):
    d = np.array([[0, 5e9, 0], [1e9, 0, 2e9], [3e9, 0, 0]])
    path = tmp_path / "d.csv"
    np.savetxt(path, d, delimiter=",")
    code, stdout, stderr = cli("ocs", "schedule", "--demand", str(path), "--ocs", "2")
    assert code == 0, stderr
    assert "spectra-like" in stdout and "d.csv: 3 pods" in stdout


@pytest.fixture
def bad_files(tmp_path):
    files = {}
    for name, m in {
        "nonsquare": np.ones((2, 3)),
        "negative": np.array([[0.0, -1.0], [1.0, 0.0]]),
        "nan": np.array([[0.0, np.nan], [1.0, 0.0]]),
        "diagonal": np.array([[1.0, 1.0], [1.0, 0.0]]),
        "zero": np.zeros((3, 3)),
        "one": np.zeros((1, 1)),
    }.items():
        files[name] = tmp_path / f"{name}.npy"
        np.save(files[name], m)
    files["text"] = tmp_path / "text.csv"
    files["text"].write_text("a,b\nc,d\n")
    files["missing"] = tmp_path / "missing.npy"
    files["strings"] = tmp_path / "strings.npy"
    np.save(files["strings"], np.array([["0", "1"], ["1", "0"]]))
    files["empty"] = tmp_path / "empty.csv"
    files["empty"].write_text("")
    files["empty_npy"] = tmp_path / "empty.npy"
    files["empty_npy"].write_bytes(b"")
    files["tiny"] = tmp_path / "tiny.npy"  # bytes scaled by 1e-300: the duration LP failed
    np.save(files["tiny"], 1e-300 * np.array([[0.0, 9.0, 1.0], [3.0, 0.0, 8.0], [5.0, 2.0, 0.0]]))
    return files


BAD = [
    (["--pods", "1"], "--pods"),
    (["--ocs", "0"], "--ocs"),
    (["--delay-us", "-1"], "--delay-us"),
    (["--delay-us", "nan"], "--delay-us"),
    (["--rate-gbps", "0"], "--rate-gbps"),
    (["--demand", "nosuch"], "--demand"),
    (["--demand", "@nonsquare"], "--demand"),
    (["--demand", "@negative"], "--demand"),
    (["--demand", "@nan"], "--demand"),
    (["--demand", "@diagonal"], "--demand"),
    (["--demand", "@zero"], "--demand"),
    (["--demand", "@one"], "--demand"),
    (["--demand", "@text"], "--demand"),
    (["--demand", "@missing"], "--demand"),
    (["--demand", "@strings"], "--demand"),
    (["--demand", "@empty"], "--demand"),
    (["--demand", "@empty_npy"], "--demand"),
    (["--demand", "@tiny", "--ocs", "2"], "--demand"),
    (["--demand", "@negative", "--pods", "3"], "--demand"),
    (["--pods", "513"], "--pods"),
    (["--pods", "500", "--max-memory-gb", "0.1"], "--pods"),
]


@pytest.mark.parametrize(("argv", "option"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_naming_the_option(cli, bad_files, argv, option):
    argv = [str(bad_files[a[1:]]) if a.startswith("@") else a for a in argv]
    code, stdout, stderr = cli("ocs", "schedule", *argv, "--json")
    lines = stderr.strip().splitlines()
    assert code == 2 and stdout == "" and len(lines) == 1, stderr
    assert lines[0].startswith((f"error: {option}: ", f"error: Invalid value for '{option}': ")), (
        lines[0]
    )


def test_pods_must_match_the_file(cli, tmp_path):
    path = tmp_path / "d.npy"
    np.save(path, np.array([[0.0, 1.0], [1.0, 0.0]]))
    code, _, stderr = cli("ocs", "schedule", "--demand", str(path), "--pods", "3", "--json")
    assert code == 2 and stderr.startswith("error: --pods: "), stderr


def test_empty_csv_is_named_empty_without_a_numpy_warning(cli, bad_files):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, _, stderr = cli("ocs", "schedule", "--demand", str(bad_files["empty"]), "--json")
    assert code == 2 and stderr.strip().endswith("empty.csv is empty"), stderr
