"""htsim's own ECMP path choices, replayed in our packet engine.

Under ``ecmp_host -paths 1`` each htsim switch hashes ``(flow id, path id, salt)`` with a
random salt per switch, so htsim and our engine (``mix(entropy, switch)``) draw different paths
for the same flows, and an ECMP tail is set by its draw: the slowest flows are those on the
link that the most flows hashed onto. Comparing one draw on each side compares two collision
patterns, not two transports. To compare the transports on the same paths:

1. :func:`build_path_logger` builds, outside this repository, a copy of a csg-htsim checkout's
   ``sim/`` whose ``FatTreeSwitch::getNextHop`` also prints, the first time a spine (an
   ``UpperPod`` switch of ``-tiers 2``) forwards a packet of a flow, ``PATHLOG <spine> <flow
   id> <class>`` (class 0: data and trimmed headers, 1: the sink's ACK / NACK / PULL). The
   print is this module's own line (:data:`PATCH`); htsim's code is neither changed nor copied
   here, and :func:`logged_run` checks that the logging build's completions equal the plain
   build's, bit for bit.
2. :func:`parse_paths` reads the spine of each flow's data, and of its first control packet
   (htsim hashes ACKs and PULLs separately, so a flow's control packets can cross two spines;
   ours cross one, the reverse hash of the connection).
3. :func:`entropy_for_paths` finds, per flow, an entropy whose hash in our kernel
   (:func:`trainfabric.fabric.packet.kernel.mix`, the same call the kernel routes with) sends
   the data through that spine and the control packets through that reverse spine.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

# printed by the logging build at the top of FatTreeSwitch::getNextHop (module doc, step 1)
PATCH = """    {
        static std::set<std::tuple<uint32_t, uint32_t, int>> seen;
        int cls = pkt.type() == NDP ? 0 : 1;
        if (_type == AGG && seen.insert(std::make_tuple(_id, (uint32_t)pkt.flow_id(), cls)).second)
            std::cout << "PATHLOG " << nodename() << " " << pkt.flow_id() << " " << cls
                      << std::endl;
    }
"""
_ANCHOR = "Route* FatTreeSwitch::getNextHop(Packet& pkt, BaseQueue* ingress_port){\n"
_INCLUDES = "#include <set>\n#include <tuple>\n#include <iostream>\n"
_LINE = re.compile(r"^PATHLOG Switch_UpperPod_(\d+) (\d+) ([01])$", re.M)


def build_path_logger(htsim_dir: Path, work: Path) -> Path:
    """``htsim_ndp`` built from ``htsim_dir/sim`` copied into ``work`` with :data:`PATCH`
    (module doc); returns the binary. Raises RuntimeError naming what failed."""
    src = Path(htsim_dir) / "sim"
    if not (src / "datacenter" / "fat_tree_switch.cpp").is_file():
        raise RuntimeError(f"no csg-htsim sources under {htsim_dir} (sim/datacenter/ expected)")
    sim = Path(work) / "sim"
    shutil.copytree(src, sim, ignore=shutil.ignore_patterns("*.o", "*.a", "htsim_*"))
    cpp = sim / "datacenter" / "fat_tree_switch.cpp"
    text = cpp.read_text()
    if text.count(_ANCHOR) != 1:
        raise RuntimeError(f"{cpp.name}: getNextHop's first line not found once; htsim changed")
    cpp.write_text(_INCLUDES + text.replace(_ANCHOR, _ANCHOR + PATCH))
    for target, cwd in (([], sim), (["htsim_ndp"], sim / "datacenter")):
        r = subprocess.run(["make", "-j2", *target], cwd=cwd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"building the path-logging htsim failed: {r.stdout[-400:]}")
    return sim / "datacenter" / "htsim_ndp"


def logged_run(exe_log: Path, sc, seed: int, plain) -> str:
    """The ``PATHLOG`` lines of the path-logging build on scenario ``sc`` under ECMP, run to
    the plain run's ``-end`` (``plain``: an :class:`_htsim.HtsimRun`); raises RuntimeError if
    its completions differ from the plain build's (the print must change nothing)."""
    import _htsim as H

    with tempfile.TemporaryDirectory(prefix="htsim_paths_") as tmp:
        cm = H.write_cm(sc, Path(tmp) / f"{sc.name}.cm")
        cmd = H.htsim_command(exe_log, cm, sc, "ecmp", plain.end_us, Path(tmp) / "log.dat", seed)
        text = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, check=True).stdout
    _, finish, _, _ = H.parse_output(text, sc)
    if not np.array_equal(finish, plain.finish_s):
        raise RuntimeError(f"the path-logging htsim moved the completions of {sc.name!r}")
    return "".join(m.group(0) + "\n" for m in _LINE.finditer(text))


def parse_paths(text: str, n_flows: int) -> tuple[np.ndarray, np.ndarray]:
    """Per flow (index = htsim flow id - 1): the spine its data crossed and the spine its
    first control packet crossed (-1: none, a flow within one leaf). A flow whose data
    crossed two spines raises ValueError (ECMP hashes a flow's data onto one path)."""
    data = np.full(n_flows, -1, np.int64)
    ctrl = np.full(n_flows, -1, np.int64)
    for m in _LINE.finditer(text):
        spine, f, cls = int(m.group(1)), int(m.group(2)) - 1, int(m.group(3))
        out = data if cls == 0 else ctrl
        if out[f] < 0:
            out[f] = spine
        elif cls == 0 and out[f] != spine:
            raise ValueError(f"flow {f + 1}: data crossed spines {out[f]} and {spine}")
    return data, ctrl


def _uplink(e, leaf: int, n_hosts: int, n_uplinks: int) -> int:
    """The uplink our kernel's ECMP takes at ``leaf`` for entropy ``e`` (plane 0; the
    kernel's ``route``: ``mix(entropy, switch node) mod uplinks``, leaf ``a`` being node
    ``n_hosts + a``)."""
    from trainfabric.fabric.packet import kernel as K

    return int(np.uint64(K.mix(np.uint64(e), np.uint64(n_hosts + leaf))) % np.uint64(n_uplinks))


def _reverse(e):
    """The entropy of a connection's control packets (the kernel's ``mix(entropy, 0xACC)``)."""
    from trainfabric.fabric.packet import kernel as K

    return np.uint64(K.mix(np.uint64(e), np.uint64(0xACC)))


def ecmp_spines(host_leaf, n_hosts, n_uplinks, src, dst, entropy):
    """Per flow the spine our ECMP sends its data through and the one its control packets
    take back (-1 within a leaf; one plane, uplink ``j`` to spine ``j``)."""
    a, b = host_leaf[src], host_leaf[dst]
    data = np.array([_uplink(e, x, n_hosts, n_uplinks) for e, x in zip(entropy, a, strict=True)])
    ctrl = np.array(
        [_uplink(_reverse(e), y, n_hosts, n_uplinks) for e, y in zip(entropy, b, strict=True)]
    )
    same = a == b
    data[same] = ctrl[same] = -1
    return data, ctrl


def max_collision(host_leaf, src, dst, spine) -> int:
    """The most flows whose data share one leaf uplink or one spine downlink."""
    a, b = host_leaf[src], host_leaf[dst]
    x = spine >= 0
    n = int(max(host_leaf.max() + 1, spine.max() + 1))
    up = np.bincount(a[x] * n + spine[x], minlength=n * n)
    down = np.bincount(spine[x] * n + b[x], minlength=n * n)
    return int(max(up.max(initial=0), down.max(initial=0)))


def entropy_for_paths(
    host_leaf: np.ndarray,
    n_hosts: int,
    n_uplinks: int,
    src: np.ndarray,
    dst: np.ndarray,
    data_spine: np.ndarray,
    ctrl_spine: np.ndarray,
    seed: int = 0,
) -> np.ndarray:
    """Per flow an entropy under which our ECMP (:func:`ecmp_spines`) sends the data through
    ``data_spine`` and the control packets through ``ctrl_spine`` (-1: any): the first of the
    candidates ``mix(seed, f x 100003 + t)``, ``t = 0, 1, ..``, whose hashes match (about
    16 x 16 tries on 16 uplinks)."""
    from trainfabric.fabric.packet import kernel as K

    out = np.zeros(src.size, np.uint64)
    for f in range(src.size):
        a, b = int(host_leaf[src[f]]), int(host_leaf[dst[f]])
        t = 0
        while True:
            e = np.uint64(K.mix(np.uint64(seed), np.uint64(f * 100_003 + t)))
            if a == b or (
                _uplink(e, a, n_hosts, n_uplinks) == data_spine[f]
                and (
                    ctrl_spine[f] < 0
                    or _uplink(_reverse(e), b, n_hosts, n_uplinks) == ctrl_spine[f]
                )
            ):
                out[f] = e
                break
            t += 1
    return out


def packet_on_paths(sc, data_spine: np.ndarray, ctrl_spine: np.ndarray, seed: int = 0):
    """Our packet engine under ECMP on scenario ``sc`` (the harness's matched settings,
    :func:`_htsim.packet_completions`) with every flow on the given spines
    (:func:`entropy_for_paths`): its summary on htsim's definitions (:func:`_htsim.summary`)
    and the flows' FCTs (s)."""
    from dataclasses import replace

    import _htsim as H

    from trainfabric.fabric.packet import simulate_packets

    topo = H.topology(sc)
    leaf, U = topo.host_leaf[0], topo.tables["leaf_up"].shape[2]
    if topo.tables["spine_down"].shape[1] != U:
        raise ValueError(f"{U} uplinks per leaf but {topo.tables['spine_down'].shape[1]} spines")
    ent = entropy_for_paths(leaf, sc.n, U, sc.src, sc.dst, data_spine, ctrl_spine, seed)
    flows = replace(H.flow_table(sc, 0, ack_delay=False), entropy=ent)
    config = H.packet_config(queue_packets=H.our_queue_packets(), release_on="acked")
    res = simulate_packets(topo, flows, "ecmp", config=config, seed=seed)
    H.check_finished(sc, res.acked_s, "our packet engine (ecmp, htsim's paths)")
    row = H.summary(sc, res.start_s, res.acked_s, 0.0, int(res.retransmitted), H.new_packets(sc))
    return row, res.acked_s - res.start_s
