"""Clean failures of the environment: a full disk or a read-only directory under a command
that writes is one stderr line naming the path and exit 1, with nothing half-written and a
resume that recomputes only what is missing; SIGTERM is one line and exit 143; an absurd
size is refused before any work, naming the field and its bound (exit 2); a failing command
off a terminal prints nothing but its error line.

The real full disk and read-only mount need root (a tmpfs mount); those tests carry the
``needs_root`` mark, one by one. Without root a full disk is simulated in-process (the
writer's flush raises ENOSPC) and a read-only directory is one of mode 0o555."""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trainfabric import io
from trainfabric.config import validate
from trainfabric.errors import ConfigError, WriteError
from trainfabric.runs.store import RunDir
from trainfabric.workloads.job import Job

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
HUGE = 2**63 - 1


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@contextlib.contextmanager
def _tmpfs(path: Path, options: str) -> Iterator[Path]:
    """A tmpfs mounted at ``path`` for the block (skips the test where mounting fails)."""
    path.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def read_only_dir(tmp_path) -> Iterator[Path]:
    """A directory nothing can be written into: a read-only tmpfs as root (whom permission
    bits do not stop), else a directory of mode 0o555."""
    path = tmp_path / "read-only"
    if os.geteuid() == 0:
        with _tmpfs(path, "ro,size=64k"):
            yield path
        return
    path.mkdir()
    path.chmod(0o555)
    yield path
    path.chmod(0o755)


@pytest.fixture
def step_sweep(tmp_path, step_experiment) -> Path:
    """A sweep file of the in-process ``step`` experiment: 6 cells (x = 0..5, one seed)."""
    path = tmp_path / "step.toml"
    path.write_text('experiment = "step"\nseeds = 1\n[grid]\nx = [0, 1, 2, 3, 4, 5]\n')
    return path


def _fill_after(monkeypatch, folder: Path, room: int) -> Callable[[], None]:
    """Simulate a disk that holds ``room`` more files in ``folder``: flushing any further
    file written there raises ENOSPC (after its bytes went to the temporary file). Returns
    ``free()``, which gives the disk its space back."""
    real = io._fsync
    written: list[Path] = []

    def fsync(path: Path, directory: bool = False) -> None:
        if not directory and path.parent == folder:
            if len(written) >= room:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            written.append(path)
        real(path, directory)

    monkeypatch.setattr(io, "_fsync", fsync)
    return lambda: monkeypatch.setattr(io, "_fsync", real)


def _sweep(cli, sweep: Path, out: Path, *extra: str):
    return cli("sweep", str(sweep), "--executor", "serial", "--out", str(out), *extra)


def test_full_disk_under_a_sweep_is_one_line_and_the_resume_is_exact(
    cli, step_sweep, tmp_path, monkeypatch, strict_loads
):
    run = tmp_path / "run"
    free = _fill_after(monkeypatch, run / "cells", room=2)
    code, out, err = _sweep(cli, step_sweep, run)
    assert code == 1 and out == ""
    line = _one_line(err)  # no progress bar off a terminal, no traceback
    assert line.startswith(f"error: cannot write {run}/cells/") and line.endswith(
        ".parquet: No space left on device"
    )
    cells = sorted(p.name for p in (run / "cells").iterdir())
    assert len(cells) == 2 and all(name.endswith(".parquet") for name in cells)  # no .tmp
    free()
    code, out, err = _sweep(cli, step_sweep, run, "--json")
    assert code == 0, err
    summary = strict_loads(out)
    assert (summary["computed"], summary["skipped"], summary["rows"]) == (4, 2, 6)


def test_full_disk_under_ocs_plan_is_one_line(cli, tmp_path, monkeypatch):
    out_dir = tmp_path / "plan"
    _fill_after(monkeypatch, out_dir, room=1)
    code, out, err = cli(
        "ocs", "plan", "--workload", "dp-ring", "--pods", "4", "--out", str(out_dir)
    )
    assert code == 1 and out == ""
    line = _one_line(err)
    assert line.startswith(f"error: cannot write {out_dir}/") and "No space left on device" in line
    assert len([p for p in out_dir.iterdir() if p.name != ".lock"]) == 1  # whole files only


def test_an_environment_oserror_outside_the_atomic_writer_is_one_line(cli, monkeypatch):
    """A write that bypasses :func:`trainfabric.io.atomic_write` (a library's cache, a
    checkpoint) still ends in one line naming its file, exit 1."""
    import trainfabric.runs

    def over_quota(run_dir):
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/cache/x.bin")

    monkeypatch.setattr(trainfabric.runs, "render_report", over_quota)
    code, _, err = cli("report", "some-run")
    assert code == 1
    assert _one_line(err) == "error: /cache/x.bin: Disk quota exceeded"


@pytest.mark.parametrize("command", ["ocs-plan", "sweep"])
@pytest.mark.parametrize("where", ["inside", "itself"])
def test_read_only_out_dir_is_one_line(cli, read_only_dir, step_sweep, command, where):
    out = read_only_dir / "run" if where == "inside" else read_only_dir
    if command == "sweep":
        code, stdout, err = _sweep(cli, step_sweep, out)
    else:
        code, stdout, err = cli("ocs", "plan", "--out", str(out))
    assert code == 1 and stdout == ""
    reason = "Read-only file system" if os.geteuid() == 0 else "Permission denied"
    assert _one_line(err) == f"error: cannot write {out}: {reason}"


def test_a_lock_file_in_a_read_only_dir_names_it(read_only_dir):
    with pytest.raises(WriteError) as info, RunDir(read_only_dir).lock():
        pass
    assert info.value.path == str(read_only_dir / ".lock")
    assert "\n" not in str(info.value)


@needs_root
def test_real_full_disk_under_a_sweep_then_resume_after_freeing_space(
    cli, step_sweep, tmp_path, strict_loads
):
    with _tmpfs(tmp_path / "disk", "size=16k") as disk:  # 4 pages: lock, manifest, 2 cells
        code, out, err = _sweep(cli, step_sweep, disk / "run")
        assert code == 1 and out == ""
        assert _one_line(err).endswith(": No space left on device")
        kept = {p.name for p in (disk / "run" / "cells").iterdir()}
        assert kept and all(name.endswith(".parquet") for name in kept)
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
        code, out, err = _sweep(cli, step_sweep, disk / "run", "--json")
    assert code == 0, err
    summary = strict_loads(out)
    assert (summary["computed"], summary["skipped"]) == (6 - len(kept), len(kept))


@needs_root
def test_real_full_disk_under_ocs_plan_is_one_line(cli, tmp_path):
    with _tmpfs(tmp_path / "disk", "size=4k") as disk:  # the lock file takes the one page
        code, out, err = cli(
            "ocs", "plan", "--workload", "dp-ring", "--pods", "4", "--out", str(disk)
        )
        assert code == 1 and out == ""
        line = _one_line(err)
        assert line.startswith(f"error: cannot write {disk}/") and line.endswith(
            ": No space left on device"
        )
        assert {p.name for p in disk.iterdir()} == {".lock"}


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_failing_sweep_off_a_terminal_prints_one_line(tmp_path):
    """The real process, stderr a pipe, a file-size limit as the full disk (EFBIG; Python
    ignores SIGXFSZ): no progress bar before the error, exit 1."""
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('experiment = "moe_skew"\nseeds = 2\n[base]\nexperts = 16\n')
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainfabric.cli", "sweep", str(sweep), "--out", str(out)]
        + ["--executor", "serial"],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)),
    )
    assert proc.returncode == 1 and proc.stdout == ""
    line = _one_line(proc.stderr)
    assert line.startswith(f"error: cannot write {out}/cells/") and line.endswith(
        ".parquet: File too large"
    )


def _job_toml(tmp_path: Path, section: str, key: str, value: int) -> Path:
    """A valid job file (4 pods of 8 GPUs, data parallel) with ``[section] key = value``."""
    tables = {
        "model": {"layers": 4, "hidden": 1024, "heads": 8, "seq_len": 2048, "vocab": 50000},
        "parallelism": {"dp": 32},
        "placement": {"pods": 4, "gpus_per_pod": 8},
    }
    tables[section][key] = value
    text = "".join(
        f"[{name}]\n" + "".join(f"{k} = {v}\n" for k, v in fields.items())
        for name, fields in tables.items()
    )
    path = tmp_path / f"{section}-{key}.toml"
    path.write_text(text)
    return path


JOB_CAPS = [
    ("model", "hidden", "at most 1,048,576"),
    ("model", "ffn_hidden", "at most 4,194,304"),
    ("model", "moe_ffn_hidden", "at most 4,194,304"),
    ("model", "seq_len", "at most 67,108,864"),
    ("model", "vocab", "at most 16,777,216"),
    ("model", "heads", "at most 65,536"),
    ("model", "kv_heads", "at most 65,536"),
    ("model", "layers", "at most 10,000"),
    ("model", "first_dense_layers", "at most 10,000"),
    ("model", "moe_experts", "at most 65,536"),
    ("model", "moe_shared_experts", "at most 65,536"),
    ("model", "moe_top_k", "at most 65,536"),
    ("model", "dtype_bytes", "at most 8"),
    ("parallelism", "tp", "at most 4,096"),
    ("parallelism", "pp", "at most 10,000"),
    ("parallelism", "dp", "at most 268,435,456"),
    ("parallelism", "ep", "at most 65,536"),
    ("parallelism", "micro_batches", "at most 4,096"),
    ("parallelism", "micro_batch_size", "at most 1,048,576"),
    ("parallelism", "grad_dtype_bytes", "at most 8"),
    ("placement", "pods", "at most 65,536"),
    ("placement", "gpus_per_pod", "at most 4,096"),
]


@pytest.mark.parametrize(("section", "key", "bound"), JOB_CAPS)
@pytest.mark.parametrize("command", ["workloads-show", "ocs-plan"])
def test_absurd_job_size_refused_naming_field_and_bound(
    cli, tmp_path, section, key, bound, command
):
    job = _job_toml(tmp_path, section, key, HUGE)
    argv = ["workloads", "show", str(job)]
    if command == "ocs-plan":
        argv = ["ocs", "plan", "--workload", str(job), "--out", str(tmp_path / "plan")]
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    line = _one_line(err)
    assert line.startswith(f"error: {section}.{key}: {bound} (") and "got 9,223,372" in line


@pytest.mark.parametrize(("section", "key", "bound"), JOB_CAPS)
def test_absurd_job_size_refused_by_the_schema_before_any_work(
    tmp_path, allocates_at_most, section, key, bound
):
    data = tomllib.loads(_job_toml(tmp_path, section, key, HUGE).read_text())
    with allocates_at_most(1), pytest.raises(ConfigError) as info:
        validate(Job, data)
    assert info.value.field == f"{section}.{key}" and info.value.message.startswith(bound)


OPTION_CAPS = [
    (["ocs", "plan", "--pods", str(HUGE)], "'--pods'", "65536"),
    (["ocs", "plan", "--ports", str(HUGE)], "'--ports'", "4096"),
    (["ocs", "detect", "--synthetic", "--top-r", str(HUGE)], "'--top-r'", "16773120"),
    (["ocs", "detect", "--synthetic", "--change-at", str(HUGE)], "'--change-at'", "10000000"),
    (["ocs", "detect", "--reference-slots", str(HUGE)], "'--reference-slots'", "10000000"),
    (["ocs", "online", "--jumps", str(HUGE)], "'--jumps'", "10000000"),
    (["ocs", "fairness", "--pods", str(HUGE)], "'--pods'", "4096"),
    (["fabric", "job", "--gpus-per-pod", str(HUGE)], "'--gpus-per-pod'", "4096"),
    (["fabric", "eval", "--seed", str(2**63)], "'--seed'", str(HUGE)),
    (["sweep", "x.toml", "--workers", str(HUGE)], "'--workers'", "1024"),
    (["experiments", "run", "moe_skew", "--seeds", str(HUGE)], "'--seeds'", "10000"),
]


@pytest.mark.parametrize(("argv", "option", "bound"), OPTION_CAPS)
def test_absurd_option_refused_naming_it_and_its_bound(cli, argv, option, bound):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    line = _one_line(err)
    assert option in line and bound in line


@pytest.mark.parametrize(
    ("param", "field", "bound"),
    [
        ("pods", "base.pods", "65536"),
        ("ports", "base.ports", "4096"),
        ("ocs", "base.ocs", "4096"),
    ],
)
def test_absurd_experiment_field_refused_naming_it_and_its_bound(
    cli, tmp_path, param, field, bound
):
    code, _, err = cli(
        "experiments", "run", "ocs_plan", "-p", f"{param}={HUGE}", "--out", str(tmp_path / "r")
    )
    assert code == 2
    line = _one_line(err)
    assert line.startswith(f"error: {field}: ") and bound in line
    assert not (tmp_path / "r").exists()  # refused before the run directory


@pytest.mark.parametrize(
    ("line", "field", "bound"),
    [
        ("seed = 9223372036854775808", "seed", "9223372036854775807"),
        ("[topology]\nswitch_radix = 9223372036854775807", "topology.switch_radix", "65536"),
    ],
)
def test_absurd_scenario_field_refused_naming_it_and_its_bound(cli, tmp_path, line, field, bound):
    scenario = tmp_path / "scenario.toml"
    scenario.write_text(f'kind = "line_rate"\n{line}\n')
    code, _, err = cli("fabric", "run", str(scenario), "--out", str(tmp_path / "r"))
    assert code == 2
    message = _one_line(err)
    assert message.startswith(f"error: {field}: ") and bound in message


def test_absurd_sweep_seed_refused(cli, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'experiment = "moe_skew"\nseeds = [0, {2**63}]\n')
    code, _, err = cli("sweep", str(sweep), "--out", str(tmp_path / "r"))
    assert code == 2
    assert _one_line(err) == (
        "error: seeds: seeds must be non-negative integers, at most 9,223,372,036,854,775,807"
    )


@pytest.mark.parametrize("refused", ["job", "missing-file"])
def test_ocs_plan_refused_workload_leaves_no_out_dir(cli, tmp_path, refused):
    """The workload is validated before ``--out`` is created: nothing is left behind."""
    job = _job_toml(tmp_path, "model", "hidden", HUGE)
    workload = str(job) if refused == "job" else str(tmp_path / "absent.toml")
    out_dir = tmp_path / "plans" / "absurd"
    code, out, err = cli("ocs", "plan", "--workload", workload, "--out", str(out_dir))
    assert code == 2 and out == ""
    field = "model.hidden" if refused == "job" else "--workload"
    assert _one_line(err).startswith(f"error: {field}: ")
    assert not (tmp_path / "plans").exists()


def test_ocs_plan_keeps_files_it_did_not_write(cli, tmp_path):
    """``--out`` holding the user's own files is refused before planning, untouched; an
    earlier plan's directory is planned into again."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "summary.json").write_text('{"mine": true}')
    argv = ("ocs", "plan", "--workload", "dp-ring", "--pods", "4", "--out")
    code, out, err = cli(*argv, str(mine))
    assert code == 2 and out == ""
    assert _one_line(err) == (
        f"error: --out: {mine} holds files that are not an earlier ocs plan; use another --out"
    )
    assert (mine / "summary.json").read_text() == '{"mine": true}'
    assert sorted(p.name for p in mine.iterdir()) == [".lock", "summary.json"]
    plans = tmp_path / "plans"
    for _ in range(2):
        code, _, err = cli(*argv, str(plans), "--json")
        assert code == 0, err
