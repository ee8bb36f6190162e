"""Every ``trainfabric ...`` command of README.md's ```bash blocks runs as written, and with
``--json`` toggled (added where absent, dropped where present; not for a command whose
``--help`` has no ``--json``).

* the commands are read from the README (``\\`` continuations joined, ``# comments`` cut);
  each one is in exactly one of :data:`FAST` (the default suite), :data:`SLOW`
  (``pytest.mark.slow``: ``make test-all``) or :data:`EXCLUDED` (with the reason it cannot run
  here), so a command added to the README fails :func:`test_every_readme_command_is_classified`
  until it is classified;
* each runs in-process (the ``cli`` fixture, which also checks that ``--json`` output is strict
  JSON) from a fresh temporary working directory, so ``runs/...`` and other outputs land there;
  the repository files it names (``configs/``, ``tests/``, ``src/``, ``benchmarks/``) are passed
  as absolute paths;
* a command that reads what an earlier README command wrote (:data:`PREREQUISITES`) gets that
  command run first in its directory;
* asserted: exit 0; ``--json``: one JSON object; text: some output and no traceback.

The seconds beside each command: one run of the README command (a subprocess, at ``nice 19``
on a 2-core machine busy with another job, so above an idle machine's). ``SLOW`` holds what
took over about 10 s, and the few that cost this test (both runs, in-process) much more than
their single run. With those four still in it, this file's default run took 128 s of wall time
under that load and 97 s of CPU; without them, ``FAST`` costs about 59 s of that wall time,
so under a minute on an idle machine.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
REPO_DIRS = ("configs", "tests", "src", "benchmarks")

FAST = {
    "workloads list": 0.9,
    "workloads show gpt3-175b": 2.5,
    "workloads show moe --pods 32 --rate-gbps 400 --json": 1.3,
    "workloads export hybrid hybrid.json": 1.0,
    "workloads export hybrid hybrid-tm.json --traffic": 0.9,
    "workloads show hybrid.json": 0.8,
    "workloads show tests/data/chakra/all_reduce/8npus_1MB/": 1.0,
    "workloads show tests/data/chakra/all_reduce/8npus_1MB/all_reduce.0.et --json": 0.9,
    "workloads show src/trainfabric/workloads/data/gpt13b-128gpu-tp8-pp2.txt": 0.9,
    "fabric job --workload tests/data/chakra/all_reduce/8npus_1MB/ --gpus-per-pod 1": 4.5,
    "ocs plan --workload src/trainfabric/workloads/data/gpt13b-128gpu-tp8-pp2.txt"
    " --gpus-per-pod 8 --ports 8 --ocs 4": 4.1,
    "diloco sim --workload src/trainfabric/workloads/data/gpt13b-128gpu-tp8-pp2.txt": 2.1,
    "workloads export llama3-70b out/ --format chakra --pods 16": 0.9,
    "ocs plan --workload moe --pods 16 --ports 8 --ocs 4 --json": 2.9,
    "ocs compare --workload hybrid --pods 16": 2.0,
    "ocs online --traffic random-walk --slots 10000 --json": 1.3,
    "ocs detect --synthetic --detector glr --statistic marginals --json": 0.7,
    "ocs schedule --demand moe --pods 32 --ocs 4 --delay-us 20 --json": 2.9,
    "fabric job --workload llama3-70b --pods 512 --mode adaptive --json": 7.3,
    "fabric cluster show configs/clusters/spectrum-x-32k.toml": 0.6,
    "fabric collective --cluster configs/clusters/spectrum-x-32k.toml"
    " --op all_reduce --sizes 8:8G --gpus 1024": 1.7,
    "fabric job --workload llama3-70b --pods 64 --cluster configs/clusters/spectrum-x-8k.toml": 3.9,
    "fabric cluster show tests/data/astra/network/switch_switch.yml": 1.0,
    "diloco sim --policy wa_forecast --regime bursty --seed 0 --json": 3.8,
    "diloco sim --trace src/trainfabric/diloco/data/azure_llm_code_2023.csv"
    " --rate-scale 2 --json": 2.2,
    "experiments list": 3.0,
}

SLOW = {
    # under 10 s alone but not in this test (both runs, and the sweep before the report):
    # kept out of the default suite to hold this file near 60 s there
    "ocs fairness --jobs moe,pipeline --pods 8 --json": 4.5,  # in this test: 10.6 to 30.5
    "experiments run ocs-e5 --quick": 5.7,  # in this test: 9.8
    "sweep configs/critical-path.toml": 6.7,  # in this test: 16.8
    "report runs/critical-path": 2.4,  # after the sweep; in this test: 12.3
    "fabric run configs/fabric-line-rate.toml"
    " --cluster tests/data/astra/network/switch_switch.yml": 4.5,  # in this test: 7.7
    "experiments run sync-over-ocs --quick --json": 5.3,  # in this test: 12.3
    "experiments run rewire-or-defer --quick --json": 6.4,  # in this test: 13.0
    "experiments run moe_skew -p gini=0.3 --seeds 5": 4.9,  # in this test: 9.3
    # over 10 s alone
    "fabric eval --quick --json": 81.3,
    "fabric run configs/fabric-failures.toml": 11.8,
    "fabric eval --engine packet --quick --json": 20.5,
    "fabric job --workload llama3-70b --pods 128 --mode spray --failures 0.1 --json": 14.5,
    "fabric run configs/fabric-iteration.toml": 16.5,
    "diloco protocol --quick --json": 17.7,
    "experiments run sync-under-failures --quick --json": 19.0,
    "experiments run sync-under-failures --seeds 3": 108.5,
    "experiments run fabric_flaps --quick": 37.2,
    # not timed: 300 steps of 2 learner processes (torch) over shaped network namespaces
    "diloco train --learners 2 --steps 300 --json": None,
}

# Commands that need root for their network namespaces (skipped elsewhere).
NEEDS_ROOT = {"diloco train --learners 2 --steps 300 --json"}

EXCLUDED = {
    "diloco serve": "a vLLM server (the .venv-serve virtualenv) that runs until stopped",
    "diloco replay azure --url http://127.0.0.1:PORT --rate-scale 0.2 --json": (
        "needs a running server at a port that `diloco serve` printed (PORT is a placeholder)"
    ),
    "diloco sidecar --url http://127.0.0.1:PORT --period 1": (
        "runs until stopped, beside a running server (PORT is a placeholder)"
    ),
    "diloco live --policy wa_forecast --quick --json": (
        "the real vLLM server (.venv-serve), training over network namespaces (root): minutes"
    ),
    "diloco live --testbed --fragments 4 --quick": (
        "the real vLLM server (.venv-serve), training over network namespaces (root), "
        "pinned to two cores: minutes"
    ),
    "diloco calibrate runs/bench-diloco-live/*": (
        "reads the run directories that `diloco live` (benchmarks/diloco_live.py) writes; "
        "a shell glob"
    ),
    "sweep configs/critical-path.toml --executor ray": (
        "starts a local Ray cluster (the same sweep runs here on the process pool)"
    ),
}

# A command that reads what another README command wrote: that one runs first, as written.
PREREQUISITES = {
    "workloads show hybrid.json": "workloads export hybrid hybrid.json",
    "report runs/critical-path": "sweep configs/critical-path.toml",
}


def readme_commands(text: str) -> list[str]:
    """The ``trainfabric`` commands of ``text``'s ```bash blocks, in order: their arguments
    after ``trainfabric`` (continuations joined, comments cut, single spaces)."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            if line.startswith("trainfabric "):
                commands.append(" ".join(shlex.split(line, comments=True)[1:]))
    return commands


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def _argv(command: str) -> list[str]:
    """``command``'s arguments, repository paths made absolute."""

    def absolute(arg: str) -> str:
        if arg.split("/")[0] in REPO_DIRS and (ROOT / arg).exists():
            return str(ROOT / arg)
        return arg

    return [absolute(a) for a in shlex.split(command)]


def _params():
    for command in COMMANDS:
        marks = []
        if command in EXCLUDED:
            marks.append(pytest.mark.skip(reason=EXCLUDED[command]))
        if command in SLOW:
            marks.append(pytest.mark.slow)
        if command in NEEDS_ROOT:
            marks.append(
                pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
            )
        yield pytest.param(command, marks=marks, id=command)


def test_every_readme_command_is_classified():
    assert COMMANDS, "no trainfabric command found in README.md's bash blocks"
    classified = FAST.keys() | SLOW.keys() | EXCLUDED.keys()
    unclassified = [c for c in COMMANDS if c not in classified]
    assert not unclassified, f"README commands not in FAST, SLOW or EXCLUDED: {unclassified}"
    stale = sorted(classified - set(COMMANDS))
    assert not stale, f"classified commands no longer in README.md: {stale}"
    both = (FAST.keys() & SLOW.keys()) | (FAST.keys() | SLOW.keys()) & EXCLUDED.keys()
    assert not both, f"commands in more than one class: {sorted(both)}"
    assert set(PREREQUISITES.values()) <= set(COMMANDS) - EXCLUDED.keys()


def test_the_extraction_joins_continuations_and_cuts_comments():
    text = (
        "```bash\ntrainfabric a --x 1 \\\n    --y 2   # note\npython b.py\n```\n"
        "```python\ntrainfabric not-bash\n```\n```bash\ntrainfabric c  # d\n```\n"
    )
    assert readme_commands(text) == ["a --x 1 --y 2", "c"]


def _toggled(cli, argv: list[str]) -> list[str] | None:
    """``argv`` with ``--json`` dropped or added; None when the command has no ``--json``."""
    if "--json" in argv:
        return [a for a in argv if a != "--json"]
    code, out, err = cli(*argv, "--help")
    assert code == 0, err
    return [*argv, "--json"] if "--json" in out else None


def _check(cli, argv: list[str], strict_loads) -> None:
    code, out, err = cli(*argv)
    shown = f"trainfabric {' '.join(argv)}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert code == 0, shown
    assert "Traceback" not in out + err, shown
    if "--json" in argv:
        assert isinstance(strict_loads(out), dict), shown
    else:
        assert (out + err).strip(), shown


@pytest.mark.parametrize("command", list(_params()))
def test_readme_command_runs_as_written_and_with_json_toggled(
    command, cli, strict_loads, tmp_path, monkeypatch
):
    base = tmp_path / "base"
    base.mkdir()
    if command in PREREQUISITES:
        monkeypatch.chdir(base)
        code, _, err = cli(*_argv(PREREQUISITES[command]))
        assert code == 0, err
    argv = _argv(command)
    for variant, args in (("as-written", argv), ("toggled", _toggled(cli, argv))):
        if args is None:
            continue
        work = tmp_path / variant
        shutil.copytree(base, work)
        monkeypatch.chdir(work)
        _check(cli, args, strict_loads)
