"""The testbed's placement on a real network (root): a TCP exchange between a thread in
namespace 1 and a listener in namespace 0 crosses the shaped veths (their qdisc counters
see its bytes), ``call_in`` keeps the caller's namespace and affinity and re-raises,
``reshape`` changes the live queue, and the server starts inside a namespace pinned to a
core, reachable over the link only."""

import os
import socket
import subprocess
import threading
from functools import partial
from pathlib import Path

import pytest

from trainfabric.diloco.train import netns
from trainfabric.diloco.train.config import ShapingConfig

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
PAYLOAD = 200_000  # bytes, one way


@pytest.fixture
def net():
    with netns.create(2, ShapingConfig(rate_mbit=50.0, burst_kb=32, latency_ms=100)) as n:
        yield n


def _listen(host: str) -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind((host, 0))
    s.listen(1)
    return s, s.getsockname()[1]


def _here() -> tuple[set, str]:
    """The calling thread's cores and network namespace."""
    return os.sched_getaffinity(0), os.readlink("/proc/thread-self/ns/net")


def _send(host: str, port: int) -> tuple[set, str]:
    with socket.create_connection((host, port), timeout=10) as c:
        c.sendall(b"x" * PAYLOAD)
    return _here()


@needs_root
def test_traffic_between_namespaces_crosses_the_shaped_link(net):
    srv, port = netns.call_in(net.namespace(0), _listen, net.address(0))
    got = []

    def accept():
        conn, _ = srv.accept()
        with conn:
            while chunk := conn.recv(65536):
                got.append(len(chunk))

    t = threading.Thread(target=accept)
    t.start()
    before = net.qdisc_bytes()
    mine = _here()
    cores, space = netns.call_in(net.namespace(1), _send, net.address(0), port, cpus=(0,))
    assert cores == {0} and space != mine[1]
    t.join(10)
    srv.close()
    after = net.qdisc_bytes()
    assert sum(got) == PAYLOAD
    # learner 1's uplink sent it, the bridge's port to learner 0 delivered it (+ headers)
    assert after[1][0] - before[1][0] >= PAYLOAD
    assert after[0][1] - before[0][1] >= PAYLOAD
    assert _here() == mine


@needs_root
def test_call_in_reraises_and_reshape_changes_the_queue(net):
    with pytest.raises(ZeroDivisionError):
        netns.call_in(net.namespace(0), lambda: 1 / 0)
    net.reshape(net.shaping.model_copy(update={"latency_ms": 400.0}))
    for pre in (["tc"], ["tc", "-n", net.namespace(1)]):
        dev = net.host_dev(0) if len(pre) == 1 else net.inner_dev(1)
        shown = subprocess.run([*pre, "qdisc", "show", "dev", dev], capture_output=True,
                               text=True).stdout  # fmt: skip
        assert "rate 50Mbit" in shown and "lat 400ms" in shown
    assert netns.exec_prefix("ns", (1,)) == ["ip", "netns", "exec", "ns", "taskset", "-c", "1"]


@needs_root
def test_server_inside_a_namespace_on_one_core(net, tmp_path):
    import httpx

    from trainfabric.diloco.serve.server import serve

    space = net.namespace(0)
    with serve(kind="emulator", host=net.address(0), prefix=netns.exec_prefix(space),
               inside=partial(netns.call_in, space), cpus=(1,),
               log_path=tmp_path / "emu.log") as srv:  # fmt: skip
        status = Path(f"/proc/{srv.pid}/status").read_text()
        allowed = status.split("Cpus_allowed_list:")[1]
        assert allowed.split()[0] == "1"
        code = netns.call_in(
            net.namespace(1), lambda: httpx.get(srv.url + "/health", timeout=5).status_code
        )
        assert code == 200
        with pytest.raises(httpx.HTTPError):  # not from the root namespace: no route
            httpx.get(srv.url + "/health", timeout=1)
