"""`trainfabric workloads ...` end to end: JSON keys, files in place of presets, exit code 2."""

import json
from pathlib import Path

import pytest

from trainfabric.io import loads


def test_show_json_has_required_keys(cli):
    code, out, _ = cli("workloads", "show", "gpt3-175b", "--json")
    assert code == 0
    s = loads(out)
    assert {"nodes", "edges", "comm_bytes", "phases"} <= set(s)
    assert s["pods"] == 64 and s["job"]["params"] == 174_563_733_504


def test_export_then_show_file_agrees(cli, tmp_path):
    f = tmp_path / "pipe.json"
    assert cli("workloads", "export", "pipeline", str(f), "--pods", "8")[0] == 0
    a = loads(cli("workloads", "show", "pipeline", "--pods", "8", "--json")[1])
    b = loads(cli("workloads", "show", str(f), "--json")[1])
    for key in ("nodes", "edges", "comm_bytes", "phases", "critical_path_s"):
        assert a[key] == pytest.approx(b[key]), key
    t = tmp_path / "pipe_tm.json"
    assert cli("workloads", "export", "pipeline", str(t), "--traffic")[0] == 0
    c = loads(cli("workloads", "show", str(t), "--json")[1])
    assert c["comm_bytes"] == pytest.approx(
        loads(cli("workloads", "show", "pipeline", "--json")[1])["comm_bytes"]
    )


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("workloads", "show", "nope"), "WORKLOAD: unknown preset"),
        (("workloads", "show", "gpt3-175b", "--pods", "7"), "pods:"),
        (("workloads", "show", "moe", "--rate-gbps", "0"), "--rate-gbps"),
        (("workloads", "show", "missing.json"), "file not found"),
    ],
)
def test_user_errors_exit_2_with_one_line(cli, argv, needle):
    code, out, err = cli(*argv)
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_config_file_supplies_options_and_rejects_unknown_keys(cli, tmp_path):
    good = tmp_path / "c.toml"
    good.write_text("rate-gbps = 400\npods = 8\n")
    s = loads(cli("workloads", "show", "dp-ring", "--config", str(good), "--json")[1])
    assert s["rate_bps"] == 400e9 and s["pods"] == 8
    bad = tmp_path / "b.toml"
    bad.write_text("rate_gbs = 1\n")
    code, _, err = cli("workloads", "show", "moe", "--config", str(bad))
    assert code == 2 and "--config: unknown option 'rate_gbs'" in err


def test_help_lists_the_groups(cli):
    code, out, _ = cli("--help")
    assert code == 0
    for group in ("workloads", "ocs", "fabric", "diloco", "sweep", "report", "demo"):
        assert group in out


def test_a_file_field_is_not_renamed_to_an_option(cli, tmp_path):
    """The file's ``pods`` is not the ``--pods`` option: the error names the file's field."""
    doc = {"format": "trainfabric.traffic", "version": 1, "pods": 0, "phases": []}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    code, _, err = cli("workloads", "show", str(path))
    assert code == 2 and "error: pods: " in err and "--pods" not in err and str(path) in err


EXAMPLE_JOB = str(Path(__file__).resolve().parents[2] / "configs" / "job-example.toml")


def test_show_states_the_batch_and_the_mfu_in_closed_form(cli):
    """GPT-3 175B, TP8 x PP8 x DP8, 8 micro-batches of 1 sequence of 2,048 tokens: global batch
    1 x 8 x 8 = 64 sequences, 131,072 tokens; tied embeddings, so the active weights plus
    the head are all the parameters and the FLOPs are 6 x tokens x params."""
    s = loads(cli("workloads", "show", "gpt3-175b", "--json")[1])
    j = s["job"]
    assert (j["seq_len"], j["micro_batch_size"], j["global_batch_sequences"]) == (2048, 1, 64)
    assert j["tokens_per_iteration"] == j["global_batch_tokens"] == 64 * 2048
    assert j["iteration_flops"] == pytest.approx(6 * 64 * 2048 * j["params"], rel=1e-12)
    assert (j["mfu"], j["gpu_flops"]) == (0.4, 989e12)
    busy = j["iteration_flops"] / (j["gpus"] * j["gpu_flops"] * s["critical_path_s"])
    assert j["mfu_at_critical_path"] == pytest.approx(busy, rel=1e-12)
    assert 0 < j["mfu_at_critical_path"] < j["mfu"]  # communication and bubbles cost MFU
    assert "remapped_from" not in j and j["global_batch_note"].startswith("Global batch: 64 ")


@pytest.mark.parametrize(
    ("preset", "pods", "before", "after", "word"),
    [("gpt3-175b", 128, 64, 128, "grows with DP"), ("pipeline", 32, 8, 8, "stays")],
)
def test_show_says_whether_remapping_changed_the_global_batch(
    cli, preset, pods, before, after, word
):
    """DP absorbs --pods for gpt3-175b (every replica keeps its micro-batches: the global
    batch doubles with DP); PP absorbs it for pipeline (the global batch stays)."""
    j = loads(cli("workloads", "show", preset, "--pods", str(pods), "--json")[1])["job"]
    assert j["remapped_from"]["global_batch_sequences"] == before
    assert j["global_batch_sequences"] == after and word in j["global_batch_note"]
    base = loads(cli("workloads", "show", preset, "--json")[1])["job"]
    assert j["remapped_from"]["pods"] * base["gpus_per_pod"] == base["gpus"]


SHOW_LABELS = (
    "sequence length (tokens)",
    "global batch (sequences)",
    "MFU assumed for the compute (%)",
    "inter-pod bytes (GB)",
    "critical path at 100 Gb/s per pod pair (s)",
)


def test_show_fits_80_columns_with_units(cli, monkeypatch):
    from trainfabric import clikit

    monkeypatch.setattr(clikit.out, "_width", 80)
    code, out, _ = cli("workloads", "show", "gpt3-175b", "--pods", "128")
    assert code == 0 and "…" not in out
    assert max(len(line.rstrip()) for line in out.splitlines()) <= 80
    for label in SHOW_LABELS:
        assert label in out
    text = " ".join(out.split())
    assert text.index("grows with DP") < text.index("quantity")  # the batch note comes first


def test_the_example_job_toml_works_in_three_commands(cli, tmp_path):
    s = loads(cli("workloads", "show", EXAMPLE_JOB, "--json")[1])
    j = s["job"]
    assert (s["workload"], s["pods"], j["gpus"]) == ("llama3-8b-example", 8, 64)
    assert j["global_batch_sequences"] == 1 * 8 * 4 and j["tokens_per_iteration"] == 32 * 8192
    code, out, err = cli("fabric", "job", "--workload", EXAMPLE_JOB, "--json")
    assert code == 0, err
    assert loads(out)["workload"] == "llama3-8b-example" and loads(out)["gpus"] == 64
    code, out, err = cli("ocs", "plan", "--workload", EXAMPLE_JOB, "--out", str(tmp_path), "--json")
    assert code == 0, err
    plan = loads(out)
    assert plan["workload"] == "llama3-8b-example" and plan["pods"] == 8
    assert 0 < plan["lower_bound_s"] <= plan["hard_critical_path_s"]
