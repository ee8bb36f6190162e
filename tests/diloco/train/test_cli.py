"""``trainfabric diloco train``: bad input is one line naming the option, exit 2; a short
unshaped run prints the summary as one JSON object."""

import json
import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "trainfabric.cli", "diloco", "train"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--qdisc", "netem"], "--qdisc"),
        (["--inner", "lion"], "--inner"),
        (["--H", "0"], "--H"),
        (["--rate-mbit", "nan"], "--rate-mbit"),
        (["--outer-momentum", "1.5"], "--outer-momentum"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, field, tmp_path):
    proc = subprocess.run([*CLI, *args, "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_json_summary_unshaped(tmp_path, strict_loads):
    args = ["--learners", "2", "--steps", "6", "--H", "3", "--unshaped", "--json"]
    proc = subprocess.run([*CLI, *args, "--out", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    row = strict_loads(proc.stdout.strip().splitlines()[-1])
    assert row["syncs"] == 2 and row["tokens"] == 2 * 6 * 8 * 64
    assert row["final_loss"] > 0 and row["mean_sync_s"] > 0
    assert row["shaping"]["shaped"] is False
    assert json.loads((tmp_path / "manifest.json").read_text())["config"]["unshaped_ok"] is True


@pytest.mark.parametrize(
    "args, field",
    [(["--qdisc", "htb"], "--qdisc"), (["--rate-mbit", "5"], "--rate-mbit"),
     (["--burst-kb", "8"], "--burst-kb")],
)  # fmt: skip
def test_unshaped_refuses_shaping_options(cli, tmp_path, args, field):
    code, out, err = cli("diloco", "train", "--steps", "2", "--unshaped", *args,
                         "--out", str(tmp_path))  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"error: {field}:") and "--unshaped" in err


def test_out_holding_another_run_is_refused(cli, tmp_path):
    manifest = tmp_path / "manifest.json"
    manifest.write_text('{"experiment": "fabric-eval"}')
    code, _, err = cli("diloco", "train", "--steps", "2", "--unshaped", "--out", str(tmp_path))
    assert code == 2 and err.startswith("error: --out:") and "holds run 'fabric-eval'" in err
    assert manifest.read_text() == '{"experiment": "fabric-eval"}'
