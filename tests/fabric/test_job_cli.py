"""``fabric job`` and ``fabric run`` as a person uses them: findings first, modes side by
side, the fabric's knobs, run directories, progress and help text (32-GPU jobs, 2 layers)."""

from __future__ import annotations

import json
import re

import pytest
from rich.progress import Progress

from trainfabric.fabric.iteration import findings as F
from trainfabric.fabric.iteration import scenario as SC
from trainfabric.fabric.scenarios.findings import mode_findings
from trainfabric.io import loads

JOB = ("fabric", "job", "--workload", "llama3-70b", "--layers", "2", "--pods", "4")
SPREAD = (*JOB, "--radix", "8")  # 4 host ports per leaf and plane: the 4 servers on 8 leaves
TODAY_KEYS = {  # the single-mode --json keys scripts rely on
    "workload", "servers", "gpus", "mode", "placement", "channels", "overlap", "seed",
    "fabric", "iteration_s", "compute_only_s", "exposed_comm_s", "exposed_comm_fraction",
    "exposed_PP_s", "exposed_DP_s", "exposed_EP_s", "exposed_other_s", "comm_bytes",
    "delivered_bytes", "flows_peak", "events", "wall_s", "phase_kinds", "most_loaded_links",
    "notes", "failures",
}  # fmt: skip
NUMBER = re.compile(r"\d+\.\d+ s")


def _json(cli, *args) -> dict:
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return loads(out)


def test_failures_print_without_json(cli):
    """The crash of issue 32 (the title read a key the result does not have): the text
    output leads with the iteration and the failures' cost, with their numbers."""
    code, out, err = cli(*SPREAD, "--failures", "0.1", "--draws", "2")
    assert code == 0, err
    text = " ".join(out.split())  # findings wrap at the terminal's width
    assert text.startswith("Under ECMP an iteration of llama3-70b") and NUMBER.search(text)
    assert "With 10% failed leaf-spine cables the iteration takes" in text
    assert re.search(r"\d\.\d% longer under ECMP \(median of 2 draws; worst \d", text)
    assert "phase kind" in out and "exposed (s)" in out and "data (GB)" in out


def test_one_mode_keeps_its_flat_keys_and_several_modes_nest_them(cli):
    one = _json(cli, *SPREAD, "--failures", "0.1", "--draws", "2")
    assert set(one) >= TODAY_KEYS and "modes" not in one
    assert set(one["failures"]) >= {"failure_slowdown_median", "failure_slowdown_worst"}
    assert one["findings"] and one["wall_s"] >= one["wall_parts_s"]["healthy_s"]
    both = _json(cli, *SPREAD, "--mode", "ecmp,adaptive", "--failures", "0.1", "--draws", "2")
    assert list(both["modes"]) == ["ecmp", "adaptive"] and both["baseline_mode"] == "ecmp"
    for mode, res in both["modes"].items():
        assert set(res) >= TODAY_KEYS and res["mode"] == mode
    # the same fabric, placement, graph and seed: ECMP alone and beside adaptive agree
    assert both["modes"]["ecmp"]["iteration_s"] == one["iteration_s"]
    assert both["modes"]["ecmp"]["failures"] == one["failures"]
    ecmp, adaptive = (both["modes"][m]["iteration_s"] for m in ("ecmp", "adaptive"))
    assert both["differences"]["adaptive"]["iteration_s"] == pytest.approx(adaptive / ecmp - 1)
    assert both["wall_s"] >= sum(both["wall_parts_s"]["modes_s"].values())
    sentence = both["findings"][0]
    assert sentence.startswith("Adaptive routing finishes an iteration") and "ECMP" in sentence
    assert f"{adaptive:.4g} s vs {ecmp:.4g} s" in sentence


def test_on_one_leaf_failed_cables_cost_nothing_and_spraying_equals_adaptive(cli):
    """4 servers on one leaf (radix 256): no transfer crosses a leaf-spine cable, so every
    draw of failed cables leaves the iteration as it was (slowdown exactly 1); spraying and
    adaptive routing both split every connection evenly over the planes, so they tie."""
    res = _json(cli, *JOB, "--mode", "spray,adaptive", "--failures", "0.2", "--draws", "2")
    assert res["leaves"] == 1
    for r in res["modes"].values():
        assert r["failures"]["failure_slowdown_median"] == 1.0
        assert r["failures"]["failure_slowdown_worst"] == 1.0
    assert res["modes"]["spray"]["iteration_s"] == res["modes"]["adaptive"]["iteration_s"]
    assert any("one leaf switch" in f and "cannot slow it" in f for f in res["findings"])


def test_every_mode_takes_at_least_the_compute_and_adaptive_is_no_slower_here(cli):
    res = _json(cli, *SPREAD, "--mode", "ecmp,pinning,spray,adaptive")
    for r in res["modes"].values():
        assert r["iteration_s"] >= r["compute_only_s"] - 1e-12
        assert r["exposed_comm_s"] == pytest.approx(r["iteration_s"] - r["compute_only_s"])
    t = {m: r["iteration_s"] for m, r in res["modes"].items()}
    assert t["adaptive"] <= t["ecmp"] and t["spray"] <= t["ecmp"]


def test_the_fabric_knobs_change_the_fabric(cli):
    """Halving the NIC rate halves every link of the fabric (each plane's links run at
    NIC rate / planes), so every transfer's max-min rate halves: no iteration gets faster,
    and communication takes longer."""
    full = _json(cli, *SPREAD, "--mode", "adaptive")
    half = _json(cli, *SPREAD, "--mode", "adaptive", "--nic-gbps", "400")
    assert half["fabric"]["nic_rate_gbps"] == 400.0 and full["fabric"]["nic_rate_gbps"] == 800.0
    assert half["iteration_s"] >= full["iteration_s"]
    assert half["exposed_comm_s"] > full["exposed_comm_s"]
    two = _json(cli, *SPREAD, "--planes", "2", "--oversubscription", "2", "--radix", "16")
    assert (
        two["fabric"] | {"planes": 2, "oversubscription": 2.0, "switch_radix": 16} == two["fabric"]
    )


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--radix", "3"), "'--radix'"),
        (("--nic-gbps", "0"), "'--nic-gbps'"),
        (("--oversubscription", "0.5"), "'--oversubscription'"),
        (("--planes", "65"), "'--planes'"),
        (("--mode", "ecmp,warp"), "--mode:"),
        (("--mode", "ecmp,ecmp"), "--mode:"),
        (("--radix", "4"), "--pods: 4 servers of 8 GPUs: 32 hosts do not fit"),
    ],
)
def test_bad_knobs_name_the_option(cli, args, option):
    code, out, err = cli(*JOB, *args)
    assert code == 2 and out == "" and option in err.splitlines()[0]


def test_a_knob_with_a_cluster_file_is_refused(cli, tmp_path):
    cl = tmp_path / "small.toml"
    cl.write_text(
        'name = "small"\ngpus = 64\n[fabric]\nplanes = 2\nswitch_radix = 16\n'
        "[scale_up]\ngpus = 8\nbandwidth_gbps = 7200.0\n"
    )
    code, out, err = cli(*JOB, "--cluster", str(cl), "--planes", "2")
    assert code == 2 and out == "" and err.startswith("error: --planes:")
    assert err.count("\n") == 1 and "cluster" in err


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_out_writes_a_run_directory_with_findings(cli, tmp_path):
    run = tmp_path / "job"
    res = _json(cli, *SPREAD, "--mode", "ecmp,adaptive", "--failures", "0.1", "--draws", "2",
                "--out", str(run))  # fmt: skip
    summary = json.loads((run / "summary.json").read_text())
    assert summary["findings"] == res["findings"] and summary["run_dir"] == str(run)
    assert all(re.search(r"\d", f) for f in summary["findings"])
    assert (run / "report.html").is_file() and res["report"] == str(run / "report.html")
    stems = {p.stem for p in run.glob("*.parquet")}
    assert {SC.STEM, SC.PHASE_KINDS_STEM, "fabric_iteration_failures"} <= stems
    code, _, err = cli(*SPREAD, "--out", str(run))  # the same command again: its own dir
    assert code == 0, err


def test_modes_side_by_side_fit_80_columns(cli):
    code, out, _ = cli(*SPREAD, "--mode", "ecmp,spray,adaptive")
    assert code == 0
    assert out.startswith("Packet spraying finishes an iteration")
    assert "differences against ecmp" in out and "adaptive vs ecmp" in out
    assert "iteration (s)" in out and "exposed share (%)" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_progress_counts_every_run_and_a_long_run_says_so_first(monkeypatch):
    """One step per healthy iteration and per draw, each with the time left; with the
    threshold at 0 s the estimate is said at once, then only when it has doubled."""
    monkeypatch.setattr(SC, "ESTIMATE_S", -1.0)
    lines: list[str] = []
    bar = Progress(disable=True)
    SC.run_job(
        "llama3-70b", pods=4, layers=2, mode="ecmp,adaptive", failures=0.1, draws=2,
        fabric={"switch_radix": 8}, progress=bar, notify=lines.append,
    )  # fmt: skip
    (task,) = bar.tasks
    assert task.total == task.completed == 2 * (1 + 2) and "left" in task.description
    assert lines[0].startswith("estimate: about") and "more simulations" in lines[0]


def test_durations_read_as_a_person_says_them():
    assert SC.duration(45.2) == "45 s"
    assert SC.duration(75) == "1 min 15 s"
    assert SC.duration(4000) == "1 h 6 min"


def test_help_keeps_the_scenario_file_sections(cli):
    code, out, _ = cli("fabric", "run", "--help")
    assert code == 0
    for section in ("[[collectives]]", "[victim]", "[[flaps]]", "[topology]", "[faults]"):
        assert section in out, section
    code, out, _ = cli("fabric", "job", "--help")
    assert code == 0 and "(the" in out and "--nic-gbps" in out  # [default: (the job's own)]


def test_fabric_run_prints_findings_first(cli, tmp_path):
    f = tmp_path / "lr.toml"
    f.write_text(
        'kind = "line_rate"\nmodes = ["ecmp", "spray"]\nsizes_bytes = [1048576.0]\n'
        "[topology]\ngpus = 16\nswitch_radix = 8\nplanes = 2\n"
    )
    code, out, err = cli("fabric", "run", str(f), "--out", str(tmp_path / "run"))
    assert code == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (finding,) = summary["findings"]
    assert "line-rate fraction" in finding and re.search(r"\d+\.\d%", finding)
    assert " ".join(out.split()).startswith(finding) and "line rate fraction (%)" in out


def _mode(iteration_s: float, median: float, worst: float) -> dict:
    return {
        "iteration_s": iteration_s,
        "failures": {"fraction": 0.1, "draws": 20, "failure_slowdown_median": median,
                     "failure_slowdown_worst": worst},
    }  # fmt: skip


def test_findings_compare_each_mode_with_the_first_and_name_a_hang():
    job = {"workload": "w", "servers": 64, "gpus": 512, "leaves": 8}
    ecmp, adaptive = _mode(3.880, 1.051, float("inf")), _mode(3.194, 1.017, 1.02)
    vs, failed = F.job_findings(job, {"ecmp": ecmp, "adaptive": adaptive})
    assert (
        vs == "Adaptive routing finishes an iteration 17.7% faster than ECMP (3.194 s vs 3.880 s)."
    )
    assert failed == (
        "With 10% failed leaf-spine cables the iteration takes 5.1% longer under ECMP and 1.7% "
        "longer under adaptive routing (median of 20 draws; worst forever and 2.0%)."
    )
    diff = F.differences({"ecmp": ecmp, "adaptive": adaptive})["adaptive"]
    assert diff["iteration_s"] == pytest.approx(3.194 / 3.880 - 1)
    assert diff["failure_cost_median_pp"] == pytest.approx(100 * (0.017 - 0.051))


def test_scenario_findings_name_the_best_and_the_worst_mode():
    (line,) = mode_findings(
        {"ecmp": {"line_rate_fraction": 0.2}, "spray": {"line_rate_fraction": 0.9}}
    )
    assert line == (
        "Packet spraying has the highest line-rate fraction for the largest messages at 90.0%; "
        "ECMP the lowest at 20.0% (4.5x apart)."
    )
    (tie,) = mode_findings({"spray": {"iteration_s": 2.0}, "adaptive": {"iteration_s": 2.0}})
    assert tie == "All modes: iteration time 2.000 s."


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_failure_draws_on_two_workers_equal_the_serial_draws(cli):
    one = _json(cli, *SPREAD, "--failures", "0.1", "--draws", "2")
    two = _json(cli, *SPREAD, "--failures", "0.1", "--draws", "2", "--workers", "2")
    assert two["failures"] == one["failures"] and two["iteration_s"] == one["iteration_s"]
    code, _, err = cli(*SPREAD, "--failures", "0.1", "--workers", "0")
    assert code == 2 and "workers" in err
