"""Server launcher (process group, /health, clean stop, failures) and the tiny model builder."""

import json
import os
import socket

import httpx
import pytest

from trainfabric.diloco.serve.env import ServeError
from trainfabric.diloco.serve.model import FILES, tiny_model
from trainfabric.diloco.serve.server import command, free_port, serve


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_emulator_subprocess_starts_and_stops_without_orphans():
    with serve("emulator", port=0, start_timeout_s=60) as srv:
        assert srv.kind == "emulator" and srv.url.startswith("http://127.0.0.1:")
        assert httpx.get(f"{srv.url}/health").status_code == 200
        card = httpx.get(f"{srv.url}/v1/models").json()["data"][0]
        assert card["id"] == srv.model == "tiny-llama" and card["max_model_len"] == 8192
        pgid = srv.pid
        assert os.getpgid(srv.pid) == pgid  # its own process group
    assert not _group_alive(pgid)


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_a_server_that_exits_while_starting_is_an_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with (
            pytest.raises(ServeError, match="exited with code"),
            serve("emulator", port=port, start_timeout_s=60, log_path=tmp_path / "log"),
        ):
            pass


def test_start_timeout_kills_the_group(tmp_path, monkeypatch):
    import trainfabric.diloco.serve.server as mod

    def sleeper(kind, host, port, *args):
        return ["sleep", "30"], {}

    monkeypatch.setattr(mod, "command", sleeper)
    with (
        pytest.raises(ServeError, match="did not answer"),
        serve("emulator", start_timeout_s=0.5, log_path=tmp_path / "log"),
    ):
        pass


def test_missing_serving_env_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINFABRIC_SERVE_PYTHON", str(tmp_path / "no-python"))
    with pytest.raises(ServeError, match="TRAINFABRIC_SERVE_PYTHON"):
        command("vllm", "127.0.0.1", 1, tmp_path, 8192)
    with pytest.raises(ServeError, match="unknown server kind"):
        command("triton", "127.0.0.1", 1, None, 8192)


def test_vllm_command_is_the_spec_recipe(tmp_path):
    argv, env = command("vllm", "127.0.0.1", 1234, tmp_path, 8192)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    pairs = dict(zip(argv[3::2], argv[4::2], strict=True))
    assert pairs == {"--model": str(tmp_path), "--served-model-name": "tiny-llama",
                     "--host": "127.0.0.1", "--port": "1234", "--max-model-len": "8192",
                     "--dtype": "bfloat16"}  # fmt: skip
    assert env["VLLM_CPU_KVCACHE_SPACE"]


@pytest.mark.slow  # two builds in .venv-serve (~5 s each idle, ~25 s on a loaded machine)
def test_tiny_model_is_deterministic_and_cached(tmp_path):
    a = tiny_model(tmp_path / "a", seed=3)
    b = tiny_model(tmp_path / "b", seed=3)
    for f in FILES:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    cfg = json.loads((a / "config.json").read_text())
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == 64  # the CPU kernel's head size
    assert cfg["vocab_size"] == 512 and cfg["max_position_embeddings"] >= 8192
    assert cfg["num_hidden_layers"] == 2 and cfg["architectures"] == ["LlamaForCausalLM"]
    vocab = json.loads((a / "tokenizer.json").read_text())["model"]["vocab"]
    assert len(vocab) == 512
    stamp = (a / "model.safetensors").stat().st_mtime_ns
    assert tiny_model(tmp_path / "a", seed=3) == a  # present: not rebuilt
    assert (a / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_present_model_is_not_rebuilt(tmp_path, monkeypatch):
    import trainfabric.diloco.serve.model as mod

    for f in FILES:
        (tmp_path / f).write_text("x")
    monkeypatch.setattr(mod, "serve_python", lambda: pytest.fail("rebuilt a present model"))
    assert tiny_model(tmp_path) == tmp_path


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_a_killed_parent_leaves_no_server():
    """SIGKILL the process that started a server: the watchdog kills the server's group."""
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from trainfabric.diloco.serve.server import serve\n"
        "with serve('emulator', start_timeout_s=60) as s:\n"
        "    print(s.pid, flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pgid = int(parent.stdout.readline())
    assert _group_alive(pgid)
    parent.kill()
    parent.wait()
    end = time.monotonic() + 15
    while _group_alive(pgid) and time.monotonic() < end:
        time.sleep(0.1)
    assert not _group_alive(pgid)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_emulator_on_ipv6_loopback():
    """``--host ::1``: a free port of the IPv6 loopback, and a URL with the host in brackets."""
    assert free_port("::1") > 0
    with serve("emulator", host="::1", start_timeout_s=60) as srv:
        assert srv.url.startswith("http://[::1]:")
        assert httpx.get(f"{srv.url}/health").status_code == 200
