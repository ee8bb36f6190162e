"""The CLI contract on bad input: exit 2, one line on stderr naming the option or field, no
traceback, nothing computed first. One table of bad invocations, run in-process (Typer's
runner would hide the real exit path, so a few also run as real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from trainfabric.io import loads

BINARY = bytes(range(256)) * 4


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path | int]:
    """Bad files of every kind, written once (and ``comm_index``, the DAG node broken)."""
    d = tmp_path_factory.mktemp("bad")
    paths = {
        "dir": d / "a-folder",
        "binary": d / "binary.json",
        "binary_toml": d / "binary.toml",
        "file": d / "existing-file",
        "bad_toml": d / "bad.toml",
        "unknown_key": d / "unknown.toml",
        "option_names": d / "options.toml",
        "bool_number": d / "bool.toml",
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
    paths["bool_number"].write_text("ports = true\n")  # Click would read it as 1
    paths["escape"].write_text('kind = "line_rate"\nname = "../../escaped"\n')
    paths["sweep_bad"].write_text('experiment = "moe_skew"\nseeds = 2\n[grid]\ngini = [0.1, 2.0]\n')
    paths["sweep_ok"] = d / "sweep-ok.toml"
    paths["sweep_ok"].write_text('experiment = "moe_skew"\nseeds = 1\n')
    paths["other_run"] = d / "other-run"
    paths["other_run"].mkdir()
    (paths["other_run"] / "manifest.json").write_text('{"experiment": "fabric-eval-quick"}')
    paths["bad_manifest"] = d / "foreign-run"
    paths["bad_manifest"].mkdir()
    (paths["bad_manifest"] / "manifest.json").write_text('{"spec": 1}')
    pd.DataFrame({"x": [1.0]}).to_parquet(paths["bad_manifest"] / "results.parquet")
    paths.update(_bad_interchange(d))
    paths.update(_bad_traces(d))
    paths.update(_bad_tomls(d))
    return paths


def _bad_interchange(d: Path) -> dict[str, Path | int]:
    """A valid exported DAG (dp-ring on 4 pods), each broken in one field."""
    from trainfabric.workloads import interchange, load_workload

    doc = interchange.dag_to_dict(load_workload("dp-ring", 4).dag)
    comm = next(i for i, n in enumerate(doc["nodes"]) if n["kind"] == "comm")
    mutations = {
        "dag_1e308": ("nodes", comm, "bytes", 1e308),
        "dag_string_bytes": ("nodes", comm, "bytes", "1e8"),
        "dag_bool_id": ("nodes", 0, "id", True),
        "dag_inf_duration": ("nodes", 0, "duration_s", "INF"),
    }
    texts = {}
    for key, (part, index, field, value) in mutations.items():
        broken = json.loads(json.dumps(doc))
        broken[part][index][field] = value
        texts[key] = json.dumps(broken).replace('"INF"', "Infinity")
    tm = '{"format": "trainfabric.traffic", "version": 1, "pods": 3, "phases": [{"name": "a", '
    texts["tm_ragged"] = tm + '"matrix": [[0, 1, 2], [1, 0], [2, 1, 0]]}]}'
    texts["tm_nan"] = tm + '"matrix": [[0, NaN, 2], [1, 0, 1], [2, 1, 0]]}]}'
    return _write(d, texts, ".json") | {"comm_index": comm}


def _bad_traces(d: Path) -> dict[str, Path]:
    head = "arrival_s,prompt_tokens,output_tokens\n"
    rows = {
        "trace_1e30": "0.0,100,10\n1.0,1e30,10\n2.0,100,10\n",
        "trace_backwards": "0.0,100,10\n2.0,100,10\n1.0,100,10\n",
        "trace_huge_field": "0.0,100,10\n1.0," + "9" * 200_000 + ",10\n",
    }
    return _write(d, {key: head + body for key, body in rows.items()}, ".csv")


def _bad_tomls(d: Path) -> dict[str, Path]:
    texts = {
        "sweep_seeds": 'experiment = "moe_skew"\nseeds = 1000000000\n',
        "job_layers": (
            'name = "deep"\n[model]\nname = "deep"\nlayers = 1000000000\nhidden = 1024\n'
            "seq_len = 1024\nvocab = 32000\nheads = 8\n[parallelism]\ntp = 2\npp = 2\n"
            "dp = 2\nmicro_batches = 2\n[placement]\ngpus_per_pod = 2\npods = 4\n"
        ),
        "alltoall_32k": (
            'kind = "line_rate"\nmodes = ["ecmp"]\n[topology]\ngpus = 32768\n'
            'switch_radix = 256\n[[collectives]]\nkind = "all_to_all"\n'
        ),
        "adaptive_131k": (
            'kind = "failures"\nmodes = ["adaptive"]\nfractions = [0.1]\n[topology]\n'
            "gpus = 131072\nswitch_radix = 512\n"
        ),
    }
    return _write(d, texts, ".toml")


def _write(d: Path, texts: dict[str, str], suffix: str) -> dict[str, Path]:
    """Write each text to ``d/<key><suffix>``; the paths by key."""
    paths = {key: d / f"{key}{suffix}" for key in texts}
    for key, text in texts.items():
        paths[key].write_text(text)
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
    ("sweep {sweep_bad} --executor nosuch", "--executor"),
    # files: missing, directories, binary, bad TOML
    ("workloads show {dir}", "WORKLOAD"),
    ("workloads show {binary}", "WORKLOAD"),
    ("ocs plan --config {dir}", "--config"),
    ("ocs plan --config {binary_toml}", "--config"),
    ("ocs plan --config {bad_toml}", "--config"),
    ("ocs plan --config {unknown_key}", "--config", "unknown option 'podz'"),
    ("ocs plan --config {bool_number}", "--config", "ports = true", "not a switch"),
    ("ocs plan --config {option_names}", "--rate-gbps"),
    ("sweep {dir}", "FILE"),
    ("sweep {binary_toml}", "FILE"),
    ("sweep /no/such/sweep.toml", "FILE"),
    ("sweep {sweep_bad}", "grid.gini[1]"),
    ("fabric run {dir}", "SCENARIO"),
    ("fabric run /no/such/scenario.toml", "SCENARIO"),
    ("fabric run {binary_toml}", "SCENARIO"),
    ("fabric run {escape}", "name"),
    ("diloco sim --trace {dir}", "--trace"),
    ("diloco protocol --quick --trace /no/such/trace.csv", "--trace"),
    # outputs checked before any compute
    ("ocs plan --out {file}", "--out"),
    ("ocs plan --out {file}/sub", "--out"),
    ("fabric eval --quick --out {file}", "--out"),
    ("diloco protocol --quick --out {file}", "--out"),
    ("sweep {sweep_ok} --out {file}", "--out"),
    ("demo --out {file}", "--out"),
    ("diloco protocol --quick --out {other_run}", "--out", "holds run 'fabric-eval-quick'"),
    ("ocs plan --pods 4 --out {other_run}", "--out", "not an earlier ocs plan"),
    ("workloads export moe {dir}", "FILE"),
    ("workloads export moe {file}/x.json", "FILE"),
    ("experiments run nosuch", "NAME"),
    ("experiments run moe_skew --param gini", "--param"),
    ("experiments run moe_skew --param gini=2.0 --executor serial", "base.gini"),
    ("report /no/such/run", "RUN_DIR"),
    ("report {bad_manifest}", "RUN_DIR", "spec: Input should be a valid dictionary"),
    # special files: their size says nothing about what a read returns (/dev/zero never ends)
    ("ocs plan --config /dev/zero", "--config", "not a regular file"),
    ("workloads show /dev/zero", "WORKLOAD", "not a regular file"),
    ("diloco sim --trace /dev/zero", "--trace", "not a regular file"),
    ("sweep /dev/zero", "FILE", "not a regular file"),
    ("report {dir}", "RUN_DIR"),
    # interchange files: strict JSON, finite bounded numbers, the field's path
    ("workloads show {dag_1e308}", "nodes[{comm_index}].bytes"),
    ("workloads show {dag_string_bytes}", "nodes[{comm_index}].bytes"),
    ("workloads show {dag_bool_id}", "nodes[0].id"),
    ("workloads show {dag_inf_duration}", "nodes[0].duration_s"),
    ("workloads show {tm_ragged}", "phases[0].matrix[1]"),
    ("workloads show {tm_nan}", "phases[0].matrix[0][1]"),
    ("ocs plan --workload {tm_ragged}", "phases[0].matrix[1]"),
    # serving traces
    ("diloco sim --trace {trace_1e30}", "--trace", ":3: prompt_tokens: not a whole number"),
    ("diloco sim --trace {trace_backwards}", "--trace", ":4: arrival_s:"),
    ("diloco sim --trace {trace_huge_field}", "--trace", "longer than 256 characters"),
    # sizes refused before allocating, naming the field
    ("sweep {sweep_seeds} --executor serial", "seeds"),
    ("workloads show {job_layers}", "model.layers"),
    ("fabric run {alltoall_32k} --max-memory-gb 8", "topology.gpus"),
    ("fabric run {adaptive_131k} --max-memory-gb 8", "topology.gpus"),
    ("workloads show moe --pods 65536 --max-memory-gb 8", "--pods"),
    ("diloco sim --windows 100000000 --max-memory-gb 4", "--windows"),
    ("diloco protocol --windows 500", "--windows"),
    # usage errors
    ("ocs plan --no-such-option 3", "--no-such-option"),
    ("ocs plan --pods three", "--pods"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_invocation_exits_2_with_one_line(cli, files, case):
    """Exit 2, one stderr line that starts with the exact option or field (Click's usage
    errors quote the option), nothing on stdout, no traceback."""
    argv, field, *detail = case
    names = {k: str(v) for k, v in files.items()}
    code, stdout, stderr = cli(*argv.format(**names).split())
    lines = stderr.strip().splitlines()
    assert code == 2, (code, stdout, stderr)
    assert len(lines) == 1 and stdout == "", stderr
    field = field.format(**names)
    assert lines[0].startswith(
        (
            f"error: {field}: ",
            f"error: Invalid value for '{field}': ",
            f"error: No such option: {field}",
        )
    ), lines[0]
    assert all(d in lines[0] for d in detail), lines[0]


def test_the_table_is_large():
    """The closing note reports this count; keep it honest."""
    assert len(CASES) >= 83


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
    summary = loads(stdout)
    assert summary["tables_path"].startswith(str(out))


def test_json_is_strict_json(cli, tmp_path):
    """`--json` never prints NaN/Infinity (strict parsers reject them): an ECMP fabric's
    unstable queue has an infinite latency estimate, printed as null with its reason."""
    scenario = tmp_path / "failures.toml"
    scenario.write_text(
        'kind = "failures"\nmodes = ["ecmp"]\nfractions = [0.0]\ndraws = 1\n'
        "[topology]\ngpus = 16\nswitch_radix = 8\nplanes = 2\n"
    )
    code, stdout, _ = cli("fabric", "run", str(scenario), "--out", str(tmp_path / "r"), "--json")
    assert code == 0
    assert "Infinity" not in stdout and "NaN" not in stdout
    (row,) = loads(stdout)["rows"]
    assert row["latency_p99_us_est"] is None and row["latency_p99_us_est_nonfinite"] == "inf"
