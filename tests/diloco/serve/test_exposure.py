"""With defaults, nothing the serving toolkit starts listens beyond loopback (read from
/proc/net/tcp{,6} for the sockets of the processes it started)."""

import ipaddress
import os
from pathlib import Path
from urllib.parse import urlparse

from trainfabric.diloco.serve.emulator import Emulator
from trainfabric.diloco.serve.server import serve
from trainfabric.diloco.serve.sidecar import Sidecar, SidecarConfig


def _group(pgid: int) -> set[int]:
    """Pids whose process group is ``pgid``."""
    pids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            pids.add(int(stat.parent.name))
    return pids


def _address(hex_addr: str) -> tuple[ipaddress._BaseAddress, int]:
    host, port = hex_addr.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        ip = ipaddress.IPv4Address(raw[::-1])
    else:
        ip = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return ip, int(port, 16)


def listening(pids: set[int]) -> list[tuple[ipaddress._BaseAddress, int]]:
    """(address, port) of every TCP socket in LISTEN state owned by one of ``pids``."""
    inodes = set()
    for pid in pids:
        fd_dir = Path(f"/proc/{pid}/fd")
        for fd in fd_dir.glob("*") if fd_dir.exists() else ():
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # 0A: LISTEN
                found.append(_address(parts[1]))
    return found


def _loopback(ip) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def test_address_decoding():
    assert _address("0100007F:1F90") == (ipaddress.IPv4Address("127.0.0.1"), 8080)
    assert _address("00000000:0050") == (ipaddress.IPv4Address("0.0.0.0"), 80)
    one = "00000000000000000000000001000000:0016"
    assert _address(one) == (ipaddress.IPv6Address("::1"), 22)


def test_nothing_listens_beyond_loopback_by_default(vllm_server):
    with (
        Emulator() as emu,
        serve("emulator", start_timeout_s=60) as sub,
        Sidecar(SidecarConfig(url=emu.url, port=0)) as sc,
    ):
        pids = {os.getpid()} | _group(sub.pid) | _group(vllm_server.pid)
        found = listening(pids)
    ports = {port for _, port in found}
    ours = {urlparse(u).port for u in (emu.url, sub.url, sc.metrics_url, vllm_server.url)}
    assert ours <= ports, (ours, found)  # the check sees every server we started
    exposed = [(str(ip), port) for ip, port in found if not _loopback(ip)]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_an_explicit_host_is_announced(capfd):
    with serve("emulator", host="127.0.0.2", start_timeout_s=60) as srv:
        assert srv.url.startswith("http://127.0.0.2:")
    assert "127.0.0.2" in capfd.readouterr().err
