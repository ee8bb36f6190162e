"""The CLI contract on bad input: exit 2, one line on stderr naming the option or field, no
traceback, nothing computed first. One table of bad invocations, run in-process (Typer's
runner would hide the real exit path, so a few also run as real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BINARY = bytes(range(256)) * 4


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Bad files of every kind, written once."""
    d = tmp_path_factory.mktemp("bad")
    paths = {
        "dir": d / "a-folder",
        "binary": d / "binary.json",
        "binary_toml": d / "binary.toml",
        "file": d / "existing-file",
        "bad_toml": d / "bad.toml",
        "unknown_key": d / "unknown.toml",
        "option_names": d / "options.toml",
        "escape": d / "escape.toml",
        "sweep_bad": d / "sweep.toml",
    }
    paths["dir"].mkdir()
    paths["binary"].write_bytes(BINARY)
    paths["binary_toml"].write_bytes(BINARY)
    paths["file"].write_text("x")
    paths["bad_toml"].write_text("pods = [\n")
    paths["unknown_key"].write_text("podz = 4\n")
    paths["option_names"].write_text("rate-gbps = -1.0\n")
    paths["escape"].write_text('kind = "line_rate"\nname = "../../escaped"\n')
    paths["sweep_bad"].write_text('experiment = "moe_skew"\nseeds = 2\n[grid]\ngini = [0.1, 2.0]\n')
    return paths


# (argv with {placeholders} for the files above, text that must appear in the one line)
CASES = [
    # non-finite and out-of-range numbers
    ("workloads show moe --rate-gbps nan", "--rate-gbps"),
    ("workloads show moe --rate-gbps inf --json", "--rate-gbps"),
    ("workloads show moe --rate-gbps -5", "--rate-gbps"),
    ("ocs plan --rate-gbps nan", "--rate-gbps"),
    ("ocs plan --fallback-gbps 0", "--fallback-gbps"),
    ("ocs plan --b1 -1", "--b1"),
    ("ocs plan --b2 inf", "--b2"),
    ("ocs compare --milp-time-limit-s 0", "--milp-time-limit-s"),
    ("ocs compare --milp-time-limit-s nan", "--milp-time-limit-s"),
    ("diloco sim --rate-scale nan", "--rate-scale"),
    ("ocs plan --max-memory-gb -1", "--max-memory-gb"),
    # negative seeds, absurd sizes
    ("workloads show moe --seed -1", "--seed"),
    ("ocs plan --seed -1", "--seed"),
    ("diloco sim --seed -1", "--seed"),
    ("fabric eval --quick --seed -1", "--seed"),
    ("workloads show moe --pods 1000000000", "--pods"),
    ("ocs plan --pods 1000000000", "--pods"),
    ("ocs plan --pods -3", "--pods"),
    ("ocs plan --pods 7", "--pods"),
    ("ocs plan --ports 7 --ocs 4", "--ocs"),
    ("diloco sim --windows 1000000000000", "--windows"),
    ("diloco sim --windows 5", "--windows"),
    ("sweep {sweep_bad} --workers 0", "--workers"),
    # names, not internals
    ("diloco sim --policy nosuch", "--policy"),
    ("diloco sim --regime nosuch", "--regime"),
    ("workloads show nosuch", "WORKLOAD"),
    ("ocs plan --workload nosuch", "--workload"),
    ("sweep {sweep_bad} --executor nosuch", "executor"),
    # files: missing, directories, binary, bad TOML
    ("workloads show {dir}", "WORKLOAD"),
    ("workloads show {binary}", "WORKLOAD"),
    ("ocs plan --config {dir}", "config"),
    ("ocs plan --config {binary_toml}", "config"),
    ("ocs plan --config {bad_toml}", "config"),
    ("ocs plan --config {unknown_key}", "config.podz"),
    ("ocs plan --config {option_names}", "--rate-gbps"),
    ("sweep {dir}", "FILE"),
    ("sweep {binary_toml}", "config"),
    ("sweep /no/such/sweep.toml", "FILE"),
    ("sweep {sweep_bad}", "grid.gini[1]"),
    ("fabric run {dir}", "SCENARIO"),
    ("fabric run /no/such/scenario.toml", "SCENARIO"),
    ("fabric run {binary_toml}", "config"),
    ("fabric run {escape}", "name"),
    ("diloco sim --trace {dir}", "--trace"),
    ("diloco protocol --quick --trace /no/such/trace.csv", "--trace"),
    # outputs checked before any compute
    ("ocs plan --out {file}", "--out"),
    ("ocs plan --out {file}/sub", "--out"),
    ("fabric eval --quick --out {file}", "--out"),
    ("diloco protocol --quick --out {file}", "--out"),
    ("sweep {sweep_bad} --out {file}", "--out"),
    ("demo --out {file}", "--out"),
    ("workloads export moe {dir}", "FILE"),
    ("workloads export moe {file}/x.json", "FILE"),
    ("experiments run nosuch", "experiment"),
    ("experiments run moe_skew --param gini", "--param"),
    ("experiments run moe_skew --param gini=2.0 --executor serial", "base.gini"),
    # usage errors
    ("ocs plan --no-such-option 3", "--no-such-option"),
    ("ocs plan --pods three", "--pods"),
]


@pytest.mark.parametrize(("argv", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_invocation_exits_2_with_one_line(cli, files, argv, needle):
    args = argv.format(**{k: str(v) for k, v in files.items()}).split()
    code, stdout, stderr = cli(*args)
    lines = stderr.strip().splitlines()
    assert code == 2, (code, stdout, stderr)
    assert len(lines) == 1, stderr
    assert needle in lines[0], lines[0]
    assert "Traceback" not in stderr and stdout == ""


def test_the_table_is_large():
    """The closing note reports this count; keep it honest."""
    assert len(CASES) >= 55


@pytest.mark.parametrize(
    "argv",
    [
        ["ocs", "plan", "--rate-gbps", "nan"],
        ["workloads", "show", "/"],
        ["diloco", "sim", "--windows", "1000000000000"],
    ],
)
def test_real_process_exit_path(argv):
    """The installed entry point, not the in-process runner: exit 2, one line, no traceback."""
    res = subprocess.run(
        [sys.executable, "-m", "trainfabric.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stdout == ""


def test_version_and_short_help(cli):
    import trainfabric

    code, stdout, _ = cli("--version")
    assert code == 0 and stdout.strip() == f"trainfabric {trainfabric.__version__}"
    code, stdout, _ = cli("ocs", "plan", "-h")
    assert code == 0 and "--rate-gbps" in stdout


def test_sweep_help_keeps_its_brackets(cli):
    code, stdout, _ = cli("sweep", "--help")
    assert code == 0 and "[base]" in stdout and "[grid]" in stdout


def test_config_takes_option_names(cli, tmp_path):
    """`--config` keys are the option names (`rate-gbps`, `out`, `json`)."""
    cfg = tmp_path / "plan.toml"
    out = tmp_path / "plan-out"
    cfg.write_text(f'rate-gbps = 50.0\nout = "{out}"\njson = true\npods = 4\nports = 2\nocs = 1\n')
    code, stdout, stderr = cli("ocs", "plan", "--workload", "dp-ring", "--config", str(cfg))
    assert code == 0, stderr
    summary = json.loads(stdout, parse_constant=_reject)
    assert summary["tables_path"].startswith(str(out))


def test_json_is_strict_json(cli):
    """`--json` never prints NaN/Infinity (strict parsers reject them)."""
    code, stdout, _ = cli("workloads", "show", "pipeline", "--json")
    assert code == 0
    json.loads(stdout, parse_constant=_reject)


def _reject(token: str):
    raise ValueError(f"non-standard JSON constant {token}")
