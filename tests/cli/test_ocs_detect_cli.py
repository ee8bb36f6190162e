"""``trainfabric ocs detect``: alarms on synthetic and file input, bad input exits 2 naming the
option (in-process, plus one subprocess for the real exit path)."""

import subprocess
import sys

import numpy as np
import pytest

from trainfabric.ocs.detect.streams import multinomial_stream, pair_matrix, synthetic_change


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    """A .npy [300, 8, 8] byte sequence (1000 bytes per flow) with a change after slot 149,
    and the same as CSV slot,src,dst,bytes."""
    rng = np.random.default_rng(0)
    inst = synthetic_change(8, 0.05, rng)
    off = ~np.eye(8, dtype=bool)
    flows = multinomial_stream(inst.p0[off], inst.p1[off], 150, 500, 300, rng)
    seq = np.stack([pair_matrix(r, 8) for r in flows]) * 1000.0
    folder = tmp_path_factory.mktemp("detect")
    np.save(folder / "seq.npy", seq)
    t, i, j = np.nonzero(seq)
    lines = ["slot,src,dst,bytes"] + [
        f"{a},{b},{c},{seq[a, b, c]:.0f}" for a, b, c in zip(t, i, j, strict=True)
    ]
    (folder / "seq.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_synthetic_json_finds_the_planted_change(cli, strict_loads):
    code, out, _ = cli(
        "ocs", "detect", "--synthetic", "--pods", "16", "--change-at", "200", "--kl", "0.01",
        "--json",
    )  # fmt: skip
    assert code == 0
    res = strict_loads(out)
    assert res["categories"] == 16 and res["false_alarms"] == 0
    assert 1 <= res["delay_slots"] <= 200
    first = res["alarms"][0]
    assert first["statistic"] >= first["threshold"]
    assert abs(first["change_after_slot"] - 199) <= 20


@pytest.mark.parametrize("name", ["seq.npy", "seq.csv"])
@pytest.mark.parametrize("detector", ["glr", "cusum"])
def test_file_input(cli, strict_loads, sequence, name, detector):
    code, out, _ = cli(
        "ocs", "detect", "--traffic", str(sequence / name), "--chunk-bytes", "1000",
        "--detector", detector, "--statistic", "topr", "--top-r", "4", "--json",
    )  # fmt: skip
    assert code == 0
    res = strict_loads(out)
    assert res["first_slot"] == 50 and res["slots"] == 250 and res["categories"] == 5
    assert res["alarms"] and all(a["slot"] >= 150 for a in res["alarms"])


def test_table_output(cli):
    code, out, _ = cli("ocs", "detect", "--synthetic", "--slots", "300", "--kl", "0.05")
    assert code == 0
    assert "alarm slot" in out and "planted change after slot 199" in out


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--traffic", "/nonexistent.npy"], "--traffic"),
        ([], "--traffic"),
        (["--synthetic", "--traffic", "x.npy"], "--traffic"),
        (["--synthetic", "--delta", "1"], "--delta"),
        (["--synthetic", "--delta", "nan"], "--delta"),
        (["--synthetic", "--detector", "foo"], "--detector"),
        (["--synthetic", "--statistic", "bar"], "--statistic"),
        (["--synthetic", "--change-at", "500"], "--change-at"),
        (["--synthetic", "--kl", "5"], "--kl"),
        (["--synthetic", "--kl", "0"], "--kl"),
        (["--synthetic", "--change", "x"], "--change"),
        (["--synthetic", "--pods", "2"], "--pods"),
        (["--synthetic", "--statistic", "topr", "--top-r", "1000"], "--top-r"),
        (["--synthetic", "--per-slot", "-1"], "--per-slot"),
        (["--synthetic", "--chunk-bytes", "0"], "--chunk-bytes"),
        (["--synthetic", "--density", "99"], "--density"),
        (["--synthetic", "--statistic", "gradient", "--gradient", "GRAD"], "--gradient"),
        (["--traffic", "SEQ", "--reference-slots", "400"], "--reference-slots"),
        (["--synthetic", "--statistic", "pairs", "--pods", "4096", "--slots", "2",
          "--change-at", "1", "--max-memory-gb", "0.01"], "--pods"),
    ],
)  # fmt: skip
def test_bad_input_exits_2_naming_the_option(cli, sequence, args, option):
    args = [
        str(sequence / "seq.npy") if a in ("GRAD", "SEQ") else a for a in args
    ]  # GRAD: a [300, 8, 8] array is not a [16, 16] gradient
    code, out, err = cli("ocs", "detect", *args, "--json")
    assert code == 2, (out, err)
    assert option in err and "Traceback" not in err
    assert out == ""


def test_real_exit_path():
    proc = subprocess.run(
        [sys.executable, "-m", "trainfabric.cli", "ocs", "detect", "--synthetic", "--delta", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--delta" in proc.stderr
    assert proc.stdout == ""


def test_huge_slot_in_a_csv_names_the_line(cli, tmp_path):
    f = tmp_path / "seq.csv"
    rows = [f"{t},{i},{(i + 1) % 3},100" for t in range(8) for i in range(3)]
    f.write_text("\n".join(["slot,src,dst,bytes", *rows, "10000000000000000000,0,2,7"]) + "\n")
    code, _, err = cli("ocs", "detect", "--traffic", str(f), "--reference-slots", "5")
    assert code == 2 and err.startswith("error: --traffic: ") and "line 26" in err, err


@pytest.mark.parametrize("what", ["--traffic", "--gradient"])
@pytest.mark.parametrize("content", [b"", b"\x93NUMPY\x01"])  # empty; truncated header
def test_empty_or_truncated_npy_is_named_not_an_interrupt(cli, sequence, tmp_path, what, content):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(content)
    args = ["--traffic", str(bad)] if what == "--traffic" else [
        "--traffic", str(sequence / "seq.npy"), "--statistic", "gradient", "--gradient", str(bad)
    ]  # fmt: skip
    code, _, err = cli("ocs", "detect", *args, "--json")
    assert code == 2 and err.startswith(f"error: {what}: ") and "not a NumPy array" in err, err


def test_per_slot_beyond_the_count_limit_names_the_option(cli):
    code, _, err = cli(
        "ocs", "detect", "--synthetic", "--pods", "4", "--slots", "40", "--change-at", "20",
        "--per-slot", "1e300",
    )  # fmt: skip
    assert code == 2 and err.startswith("error: --per-slot: "), err


def test_counts_that_would_overflow_are_refused_not_nan(cli, sequence, tmp_path):
    import warnings

    huge = tmp_path / "huge.npy"
    np.save(huge, np.load(sequence / "seq.npy") * 1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning on the way
        code, out, err = cli("ocs", "detect", "--traffic", str(huge), "--json")
        assert code == 2 and out == "" and err.startswith("error: --traffic: "), err
        code, out, err = cli(
            "ocs", "detect", "--traffic", str(sequence / "seq.npy"), "--chunk-bytes", "1e-300"
        )
        assert code == 2 and out == "" and err.startswith("error: --chunk-bytes: "), err


def test_a_stream_without_counts_is_refused_not_quiet(cli, sequence, tmp_path):
    """All-zero traffic, or chunks larger than any slot's bytes: no alarm would mean
    nothing, so the field at fault is named."""
    zeros = tmp_path / "zeros.npy"
    np.save(zeros, np.zeros_like(np.load(sequence / "seq.npy")))
    code, out, err = cli("ocs", "detect", "--traffic", str(zeros), "--json")
    assert code == 2 and out == "" and err.startswith("error: --traffic: "), err
    assert "no traffic between pods" in err
    argv = ("--traffic", str(sequence / "seq.npy"), "--chunk-bytes", "1e300", "--json")
    code, out, err = cli("ocs", "detect", *argv)
    assert code == 2 and out == "" and err.startswith("error: --chunk-bytes: "), err


def test_default_top_r_adapts_to_few_pods(cli, strict_loads, tmp_path):
    f = tmp_path / "two.csv"
    rows = [f"{t},{i},{1 - i},{100 + 10 * t}" for t in range(20) for i in range(2)]
    f.write_text("\n".join(["slot,src,dst,bytes", *rows]) + "\n")
    code, out, err = cli("ocs", "detect", "--traffic", str(f), "--reference-slots", "5", "--json")
    assert code == 0, err
    assert strict_loads(out)["slots"] == 15
    code, _, err = cli("ocs", "detect", "--synthetic", "--pods", "3", "--slots", "40",
                       "--change-at", "20", "--statistic", "topr", "--json")  # fmt: skip
    assert code == 0, err
    # given explicitly, an r too large for the pods is the user's error
    code, _, err = cli("ocs", "detect", "--synthetic", "--pods", "3", "--top-r", "8")
    assert code == 2 and err.startswith("error: --top-r: "), err
