"""Transports of the packet engine (the code is in :mod:`~trainfabric.fabric.packet.kernel`).

**ndp** — receiver-driven, as NDP (Handley et al., SIGCOMM'17) and htsim's ``htsim_ndp``:

* at its start a flow sends ``initial_window_packets`` packets back to back (credits
  ``c = IW``); afterwards it sends one packet per pull: ``c <- c + (pull# - last pull#)``
  (pull numbers are cumulative per flow, so a reordered pull is harmless) and sends while
  ``c > 0``, a queued retransmission first, else new data. No other window.
* the receiver answers every arriving data packet with an ACK (selective ``seq`` and
  cumulative ``rcv_next``) and every trimmed header with a NACK; each arrival also earns the
  sender one pull. One pacer per receiving host (shared by its flows) spaces pulls by
  ``(mtu + header) x 8 / (nic_rate x pull_rate_fraction)`` seconds: if it is idle and its
  last pull left at least that long ago, the ACK/NACK carries the pull; otherwise a separate
  PULL packet waits in the pacer, which serves its flows round-robin (htsim's
  FairPullQueue). Pulls of a flow already complete are discarded.
* a NACKed sequence is queued for retransmission (sent on the next credit).

**dctcp** — a RoCE-like sender window with the DCTCP law (Alizadeh et al., SIGCOMM'10), in
bytes, per flow: ``cwnd_0 = IW x mtu``; the sender keeps ``inflight x mtu < cwnd``;

* per unmarked ACK: ``cwnd <- min(cwnd + mtu^2 / cwnd, max_window x mtu)`` (one MTU per RTT);
* per window of ACKs (``W = cwnd / mtu`` ACKs): ``F`` = marked fraction,
  ``alpha <- (1 - g) alpha + g F`` (``g = dctcp_gain``), and if any ACK was marked
  ``cwnd <- max(mtu, cwnd (1 - alpha / 2))``;
* a NACK (loss or trim): ``cwnd <- max(mtu, cwnd / 2)`` at most once per window; a timeout:
  ``cwnd <- mtu``. The receiver ACKs every data packet at once, echoing its ECN mark.

Both: a **timeout** when no cumulative progress for ``rto_s`` declares every packet sent
``rto_s`` ago and unacknowledged lost and resends it (NDP: one credit each). The receiver
NACKs a missing sequence once when a packet ``K`` or more above it arrives (``K`` =
``reorder_nack_packets`` when sprayed, 3 on in-order paths). Sequences a receiver already
has are acknowledged again but not delivered again.
"""

SEQ_STATES = ("unsent", "in flight", "acked", "queued for retransmission")
