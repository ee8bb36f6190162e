"""``diloco serve | sidecar | replay``: bad input is one line naming the option (exit 2); the
commands run against the emulator."""

import socket
from pathlib import Path

import pytest

from trainfabric.diloco.serve.emulator import Emulator


@pytest.mark.parametrize(
    "argv, field",
    [
        (["serve", "--kind", "triton"], "--kind"),
        (["serve", "--kind", "emulator", "--model", "/no/such/model"], "--model"),
        (["serve", "--port", "70000"], "--port"),
        (["sidecar", "--url", "localhost:8000"], "--url"),
        (["sidecar", "--url", "http://127.0.0.1:1", "--period", "0"], "--period"),
        (["sidecar", "--url", "http://127.0.0.1:1", "--timeout", "nan"], "--timeout"),
        (["replay", "/no/such.csv", "--url", "http://127.0.0.1:1"], "TRACE"),
        (["replay", "azure", "--url", "http://127.0.0.1:1", "--rate-scale", "0"], "--rate-scale"),
        (["replay", "azure", "--url", "http://127.0.0.1:1", "--max-requests", "0"],
         "--max-requests"),
        (["replay", "azure", "--url", "ftp://x"], "--url"),
        (["replay", "azure", "--url", "http://999.999.999.999:80"], "--url"),
        (["replay", "azure", "--url", "http://[::1"], "--url"),
        (["replay", "azure", "--url", "http://127.0.0.1:99999"], "--url"),
        (["sidecar", "--url", "http://999.999.999.999:80", "--duration", "1"], "--url"),
        (["sidecar", "--url", "http://127.0.0.1:1", "--host", "a..b", "--duration", "1"],
         "--host"),
        (["sidecar", "--url", "http://127.0.0.1:1", "--host", "192.0.2.1", "--duration", "1"],
         "--host"),
        (["serve", "--kind", "emulator", "--host", "a..b", "--duration", "1"], "--host"),
        (["serve", "--kind", "emulator", "--host", "192.0.2.1", "--duration", "1"], "--host"),
    ],
)  # fmt: skip
def test_bad_input_names_the_option(cli, argv, field):
    code, out, err = cli("diloco", *argv)
    assert code == 2 and out == ""
    assert field in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _closed_port() -> int:
    """A port nothing listens on (free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sidecar_on_a_busy_port_names_port(cli):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        code, out, err = cli("diloco", "sidecar", "--url", "http://127.0.0.1:1", "--port", port,
                             "--duration", "1")  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("error: --port:") and "already in use" in err


def test_sidecar_that_never_reaches_its_server_names_url(cli):
    code, _, err = cli("diloco", "sidecar", "--url", f"http://127.0.0.1:{_closed_port()}",
                       "--period", "0.05", "--duration", "0.3")  # fmt: skip
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: --url: no scrape")


def test_sidecar_with_a_bug_does_not_exit_0(cli, metrics_server, monkeypatch):
    import trainfabric.diloco.serve.sidecar as mod

    def boom(text, t):
        raise RuntimeError("bug")

    monkeypatch.setattr(mod, "parse_exposition", boom)
    code, _, err = cli("diloco", "sidecar", "--url", metrics_server.url, "--period", "0.05",
                       "--duration", "0.3")  # fmt: skip
    assert code == 1 and "unexpected errors" in err


def test_replay_with_no_server_names_url(cli, tmp_path):
    code, _, err = cli("diloco", "replay", "azure", "--url", "http://127.0.0.1:1",
                       "--out", str(tmp_path))  # fmt: skip
    assert code == 2 and "--url" in err


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_replay_and_sidecar_against_the_emulator(cli, tmp_path):
    with Emulator() as emu:
        code, out, _ = cli("diloco", "replay", "azure", "--url", emu.url, "--max-requests", "4",
                           "--rate-scale", "4", "--out", str(tmp_path), "--json")  # fmt: skip
        assert code == 0
        from trainfabric.io import loads

        res = loads(out)
        assert res["requests"] == 4 and res["completed"] == 4 and res["model"] == "tiny-llama"
        assert all(Path(p).is_file() for p in res["files"].values())
        code, out, _ = cli("diloco", "sidecar", "--url", emu.url, "--period", "0.05",
                           "--duration", "0.5", "--json")  # fmt: skip
        assert code == 0
        got = loads(out)
        assert got["health"] == "ok" and got["fallback"] is False and got["scrapes_ok"] >= 2
        assert got["metrics_url"].startswith("http://127.0.0.1:")


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_serve_emulator_command(cli):
    code, out, _ = cli("diloco", "serve", "--kind", "emulator", "--duration", "0.2", "--json")
    from trainfabric.io import loads

    info = loads(out)
    assert code == 0 and info["kind"] == "emulator" and info["url"].startswith("http://127.0.0.1:")
