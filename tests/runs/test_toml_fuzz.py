"""Fuzzing every TOML reader: fabric scenarios (``load_scenario``), sweeps (``load_sweep`` and
the cell expansion that validates ``base``/``grid`` against the experiment), job files (the
TOML branch of ``load_workload``) and the CLI's ``--config``. Mutations of a valid file (a
value replaced by NaN/inf/1e308/-1/"1e8"/true/[]/..., a line dropped, duplicated or added,
the text truncated) and random bytes either load correctly or raise a TrainfabricError naming
a field; a non-finite value must be refused naming its own key path. The ``--config`` fuzz
runs the real command in-process: exit 0, or exit 2 with one ``error:`` line."""

import contextlib
import io
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import TrainfabricError
from trainfabric.fabric.scenarios import load_scenario
from trainfabric.runs import expand, load_sweep
from trainfabric.workloads.workload import _load_job

SCENARIO = """kind = "failures"
name = "fuzz"
seed = 1
modes = ["ecmp", "spray"]
fractions = [0.0, 0.1]
draws = 2

[topology]
kind = "multiplane"
gpus = 32
planes = 2
switch_radix = 8
nic_rate_gbps = 800.0

[collective]
kind = "all_to_all"
size_bytes = 67108864
ranks = 8
"""
SWEEP = """experiment = "moe_skew"
seeds = 2
name = "fuzz"

[base]
experts = 16

[grid]
gini = [0.1, 0.3]
ep = [2, 4]
"""
JOB = """name = "tiny"
moe_skew_gini = 0.2

[model]
name = "tiny"
layers = 2
hidden = 1024
seq_len = 1024
vocab = 32000
heads = 8
kv_heads = 8
ffn_hidden = 4096

[parallelism]
tp = 2
pp = 2
dp = 2
micro_batches = 2

[placement]
gpus_per_pod = 2
pods = 4
"""
CONFIG = """rate-gbps = 400
pods = 8
seed = 3
"""
KEY = re.compile(r"^([\w-]+) = ")
SECTION = re.compile(r"^\[([\w.]+)\]$")
NON_FINITE = ("nan", "inf", "-inf", "+nan")
ODD = (*NON_FINITE, "1e308", "-1", "0", '"1e8"', "true", "[]", "{}", "1.5", '"x"')
ODD += ("99999999999999999999999", "[1, nan]", '"../../x"', "1979-05-27", '"\\u0000"')


def key_path(lines: list[str], i: int) -> str:
    """``section.key`` of the key on line ``i`` (``key`` before any section)."""
    key = KEY.match(lines[i]).group(1)
    for line in reversed(lines[:i]):
        if m := SECTION.match(line):
            return f"{m.group(1)}.{key}"
    return key


@st.composite
def mutations(draw, valid: str):
    """(TOML text, key path a non-finite value was put at, or None)."""
    lines = valid.splitlines()
    keyed = [i for i, line in enumerate(lines) if KEY.match(line)]
    op = draw(st.sampled_from(["replace", "replace", "drop", "duplicate", "insert", "truncate"]))
    i = draw(st.sampled_from(keyed))
    if op == "replace":
        value = draw(st.sampled_from(ODD))
        must = key_path(lines, i) if value in NON_FINITE else None
        lines[i] = f"{KEY.match(lines[i]).group(1)} = {value}"
        return "\n".join(lines) + "\n", must
    if op == "drop":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    elif op == "insert":
        lines.insert(draw(st.integers(0, len(lines))), "bogus_key = 1")
    text = "\n".join(lines) + "\n"
    if op == "truncate":
        text = text[: draw(st.integers(0, len(text) - 1))]
    return text, None


def fuzz_reader(load, path, data, must=None):
    """``load(path)`` gives a result or a TrainfabricError naming a field (``must`` exactly)."""
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    try:
        result = load(path)
    except TrainfabricError as exc:
        assert exc.field and exc.message and "\n" not in str(exc), str(exc)
        if must is not None:
            assert exc.field == must, (exc.field, must)
        return None
    assert must is None, f"accepted a non-finite value at {must}"
    return result


def sweep_cells(path):
    return expand(load_sweep(path))


READERS = {"scenario": (load_scenario, SCENARIO), "sweep": (sweep_cells, SWEEP)}
READERS["job"] = (_load_job, JOB)
RANDOM = st.binary(max_size=200) | st.text(alphabet='[]{}=".,\n #abkeynil0123456789-+', max_size=80)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("toml_fuzz")


def stated(kind: str, loaded) -> tuple:
    """What a valid file loaded as, in the terms the file states it (the sweep: its cells)."""
    if kind == "scenario":
        c = loaded.collective
        return (loaded.kind, loaded.modes, loaded.fractions, loaded.topology.gpus, c.ranks)
    if kind == "sweep":
        return tuple(sorted((c.params["gini"], c.params["ep"], c.seed) for c in loaded))
    par = loaded.parallelism
    return (loaded.model.layers, par.tp * par.pp * par.dp, loaded.placement.pods)


STATED = {
    "scenario": ("failures", ["ecmp", "spray"], [0.0, 0.1], 32, 8),
    "sweep": tuple((g, e, s) for g in (0.1, 0.3) for e in (2, 4) for s in (0, 1)),  # 2 x 2 x 2
    "job": (2, 8, 4),  # TP2 x PP2 x DP2 = 4 pods x 2 GPUs
}


@pytest.mark.parametrize("kind", READERS)
def test_the_valid_files_load(tmp, kind):
    load, text = READERS[kind]
    assert stated(kind, fuzz_reader(load, tmp / f"{kind}.toml", text)) == STATED[kind]


@settings(max_examples=40)
@given(mutations(SCENARIO))
def test_mutated_scenario_files(tmp, case):
    fuzz_reader(load_scenario, tmp / "scenario.toml", *case)


@settings(max_examples=40)
@given(mutations(SWEEP))
def test_mutated_sweep_files(tmp, case):
    fuzz_reader(sweep_cells, tmp / "sweep.toml", *case)


@settings(max_examples=40)
@given(mutations(JOB))
def test_mutated_job_files(tmp, case):
    fuzz_reader(_load_job, tmp / "job.toml", *case)


@settings(max_examples=30)
@given(st.sampled_from(list(READERS)), RANDOM)
def test_random_bytes(tmp, kind, data):
    fuzz_reader(READERS[kind][0], tmp / f"random-{kind}.toml", data)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``trainfabric ARGV`` in-process: (exit code, stdout, stderr)."""
    from trainfabric.cli import main

    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
@settings(max_examples=25)
@given(mutations(CONFIG) | RANDOM.map(lambda data: (data, None)))
def test_mutated_cli_config_files(tmp, case):
    """``workloads show dp-ring --config FILE``: a result or exit 2 with one line naming the
    option (``--pods``) or the config key; a non-finite value always exit 2."""
    data, must = case
    path = tmp / "config.toml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    argv = ["workloads", "show", "dp-ring", "--json", "--max-memory-gb", "2"]
    code, out, err = run_cli([*argv, "--config", str(path)])
    if code == 0:
        assert must is None and out.startswith("{"), err
        return
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, (code, err)
    assert "Traceback" not in err
    if must is not None:
        assert f"--{must}" in err or f"unknown option '{must}'" in err, err


@pytest.mark.parametrize("value", ["[]", "{}", "1", "true", "nan"])
def test_scenario_kind_of_any_type_is_named(tmp, value):
    """Found by the fuzzer: ``kind = []`` raised TypeError (unhashable) in parse_scenario."""
    text = SCENARIO.replace('kind = "failures"', f"kind = {value}")
    with pytest.raises(TrainfabricError) as exc:
        load_scenario(_write(tmp / "kind.toml", text))
    assert exc.value.field == "kind"


def _write(path, text):
    path.write_text(text)
    return path
