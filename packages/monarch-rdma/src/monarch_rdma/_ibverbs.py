"""The ``ibverbs`` backend: one-sided RDMA READ/WRITE through pyverbs.

- **Device**: the first device pyverbs lists (or ``MONARCH_RDMA_IBVERBS_DEVICE``),
  port ``MONARCH_RDMA_IBVERBS_PORT``; on Ethernet (RoCE) the first RoCE v2 GID
  unless ``MONARCH_RDMA_IBVERBS_GID_INDEX`` says which.
- **Registration cache**: an owner registers a buffer's memory region (MR) on
  the first connection that asks for it and deregisters it on ``drop()``; a
  reader caches the MRs of its local memory while that memory's object lives.
- **Connections**: one RC queue pair per (reader, owner process), each with its
  own completion queue. The reader creates its QP, sends its number, PSN,
  LID and GID to the owner's data-plane server (the authenticated side
  channel every owner runs) on a control connection of its own, the owner
  creates its QP, brings it to RTS and answers with its own address and the
  buffer's ``rkey``; the reader brings its QP to RTS. No actor message
  handler runs on the owner. The owner keeps its QP only while that control
  connection is open (the reader closes it with its QP), and at most
  ``MAX_QPS_PER_CONNECTION`` on one connection: a peer cannot make an owner
  hoard queue pairs.
- **Read-only buffers**: the owner registers their MR without remote-write
  access, so the NIC itself refuses a write, and says so in its answer, so
  the reader refuses first with a clear error.
- **Transfers**: pieces of ``max_chunk_size_mb``, at most ``MAX_OUTSTANDING``
  posted at once, each signalled; the reader polls its CQ until every piece
  completed or the deadline passed. A failed completion or a timeout moves the
  QP to the error state and waits for the flush of everything still posted
  before the future fails, so the NIC never writes into memory the caller got
  back; the broken QP is replaced on the next transfer.

Owner side: the data-plane operation ``IBV_CONNECT``; the owner advertises
``ibverbs`` in its owner info when it has a usable device.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import secrets
import threading
import time
import weakref
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import monarch_rdma._backends as _backends
import monarch_rdma._control as _control

from ._backend import ConnectionResources, OwnerRequest, Transfer
from ._config import get_config
from ._errors import (
    RDMABackendUnavailable,
    RDMABufferDropped,
    RDMAOwnerGone,
    RDMATimeoutError,
    RDMATransferError,
)
from ._handle import Handle
from ._memory import LocalMemory
from ._regions import Region
from ._wire import Channel, answer_json, readonly_message

__all__ = ["IBV_CONNECT", "IbverbsBackend", "available", "owner_connect", "reset"]

IBV_CONNECT = 7  # data-plane operation: args the reader's QP; answer the owner's QP and MR keys
MAX_OUTSTANDING = 16
MAX_QPS_PER_CONNECTION = 4  # a reader needs one per owner; the rest is slack for retries
CQ_DEPTH = 64
MAX_RD_ATOMIC = 16
LOCAL_ACK_TIMEOUT = 14  # 4.096 µs * 2**14 = 67 ms per try
RETRY_COUNT = 7
RNR_RETRY = 7
MIN_RNR_TIMER = 12
FLUSH_WAIT = 5.0


def _load() -> SimpleNamespace:
    """The pyverbs modules (ImportError when pyverbs is not installed).

    Imported by name: pyverbs ships no type information, and this module
    treats its objects as ``Any`` throughout."""
    names = ("addr", "cq", "device", "enums", "mr", "pd", "qp", "wr")
    modules = {name: importlib.import_module(f"pyverbs.{name}") for name in names}
    modules["e"] = modules.pop("enums")
    return SimpleNamespace(**modules)


_lock = threading.Lock()
_available: bool | None = None
_why_not: str = ""
_device: Device | None = None


def _device_names(v: SimpleNamespace) -> list[str]:
    names = []
    for dev in v.device.get_device_list():
        name = dev.name
        names.append(name.decode() if isinstance(name, bytes) else str(name))
    return names


def available() -> bool:
    """Whether an ibverbs device can be used (never raises: no pyverbs, no
    device, or a device that fails to open all give False)."""
    global _available, _why_not
    if get_config().disable_ibverbs:
        return False
    if _available is None:
        with _lock:
            if _available is None:
                try:
                    v = _load()
                    names = _device_names(v)
                    wanted = get_config().ibverbs_device
                    if not names:
                        _why_not = "no RDMA device is present"
                    elif wanted and wanted not in names:
                        _why_not = f"device {wanted!r} not among {names}"
                    else:
                        _why_not = ""
                except ImportError as error:
                    _why_not = (
                        f"pyverbs is not installed ({error}); pip install 'monarch-rdma[ibverbs]'"
                    )
                except Exception as error:  # pyverbs raises when it finds no device at all
                    _why_not = f"no usable RDMA device ({type(error).__name__}: {error})"
                _available = not _why_not
    return _available


def why_unavailable() -> str:
    if get_config().disable_ibverbs:
        return "ibverbs is disabled by configuration (MONARCH_RDMA_DISABLE_IBVERBS)"
    available()
    return _why_not


def reset() -> None:
    """Forget what was detected and opened (tests; after a configuration change)."""
    global _available, _device, _why_not
    with _lock:
        _available, _device, _why_not = None, None, ""
    with _connections_lock:
        connections = list(_connections.values())
        _connections.clear()
    for conn in connections:
        conn.close()


def gid_text(gid: Any) -> str:
    """A GID (pyverbs GID or text) as the full form pyverbs parses."""
    text = gid.gid if hasattr(gid, "gid") else str(gid)
    return ipaddress.IPv6Address(text).exploded


@dataclass
class Device:
    """The opened device: context, protection domain, port addressing."""

    v: SimpleNamespace
    name: str
    ctx: Any
    pd: Any
    port: int
    lid: int
    gid: str
    gid_index: int
    mtu: int
    ethernet: bool
    lock: threading.Lock = field(default_factory=threading.Lock)
    peers: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # owner side: qpn -> QP, CQ
    local_mrs: dict[tuple[int, int, int], Any] = field(default_factory=dict)

    @property
    def access(self) -> int:
        e = self.v.e
        return int(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_WRITE)

    def address(self, qp: Any, psn: int) -> dict[str, Any]:
        return {"qpn": int(qp.qp_num), "psn": psn, "lid": self.lid, "gid": self.gid,
                "mtu": self.mtu}  # fmt: skip

    def new_qp(self) -> tuple[Any, Any]:
        """A fresh RC QP in INIT, with its own CQ."""
        v = self.v
        cq = v.cq.CQ(self.ctx, CQ_DEPTH, None, None, 0)
        cap = v.qp.QPCap(max_send_wr=MAX_OUTSTANDING, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
        init = v.qp.QPInitAttr(qp_type=v.e.IBV_QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=0)
        attr = v.qp.QPAttr()
        attr.qp_access_flags = self.access
        attr.port_num = self.port
        attr.pkey_index = 0
        qp = v.qp.QP(self.pd, init, attr)  # pyverbs moves an RC QP to INIT given attributes
        return qp, cq

    def connect_qp(self, qp: Any, psn: int, peer: dict[str, Any]) -> None:
        """INIT -> RTR -> RTS towards ``peer``'s address."""
        v = self.v
        attr = v.qp.QPAttr(qp_state=v.e.IBV_QPS_RTR)
        attr.path_mtu = min(self.mtu, int(peer["mtu"]))
        attr.dest_qp_num = int(peer["qpn"])
        attr.rq_psn = int(peer["psn"])
        attr.max_dest_rd_atomic = MAX_RD_ATOMIC
        attr.min_rnr_timer = MIN_RNR_TIMER
        attr.qp_access_flags = self.access
        attr.port_num = self.port
        attr.pkey_index = 0
        grh = v.addr.GlobalRoute(dgid=v.addr.GID(gid_text(peer["gid"])), sgid_index=self.gid_index)
        attr.ah_attr = v.addr.AHAttr(
            dlid=int(peer["lid"]), is_global=1 if self.ethernet else 0, port_num=self.port, gr=grh
        )
        qp.to_rtr(attr)
        attr.timeout = LOCAL_ACK_TIMEOUT
        attr.retry_cnt = RETRY_COUNT
        attr.rnr_retry = RNR_RETRY
        attr.sq_psn = psn
        attr.max_rd_atomic = MAX_RD_ATOMIC
        qp.to_rts(attr)

    def register(self, addr: int, nbytes: int, remote: bool, writable: bool = True) -> Any:
        """An MR over ``[addr, +nbytes)``: for remote access (an owner's
        region: remote write only if ``writable``) or local use (a reader's)."""
        e = self.v.e
        if not remote:
            access = int(e.IBV_ACCESS_LOCAL_WRITE)
        elif writable:
            access = self.access
        else:  # read-only memory: the NIC refuses remote writes (and needs no local write)
            access = int(e.IBV_ACCESS_REMOTE_READ)
        return self.v.mr.MR(self.pd, nbytes, access, address=addr)

    def local_mr(self, memory: LocalMemory) -> tuple[Any, bool]:
        """An MR over ``memory``; (mr, cached). Cached while the object that
        owns the memory lives (a weak reference evicts it)."""
        key = (memory.addr, memory.nbytes, id(memory.keep))
        with self.lock:
            mr = self.local_mrs.get(key)
        if mr is not None:
            return mr, True
        mr = self.register(memory.addr, memory.nbytes, remote=False)
        try:
            weakref.finalize(memory.keep, self._evict, key)
        except TypeError:  # not weakly referenceable: register per transfer
            return mr, False
        with self.lock:
            self.local_mrs[key] = mr
        return mr, True

    def _evict(self, key: tuple[int, int, int]) -> None:
        with self.lock:
            mr = self.local_mrs.pop(key, None)
        if mr is not None:
            mr.close()


def _pick_gid_index(v: SimpleNamespace, ctx: Any, port: int, table_len: int) -> int:
    for index in range(min(table_len, 32)):
        try:
            if ctx.query_gid_type(port, index) != v.e.IBV_GID_TYPE_ROCE_V2:
                continue
            if int(ipaddress.IPv6Address(gid_text(ctx.query_gid(port, index)))):
                return index
        except Exception:
            continue
    return 0


def device() -> Device:
    """The opened device (opened on first use)."""
    global _device
    if _device is not None:
        return _device
    if not available():
        raise RDMABackendUnavailable(f"ibverbs is not available: {why_unavailable()}")
    with _lock:
        if _device is None:
            v = _load()
            config = get_config()
            name = config.ibverbs_device or _device_names(v)[0]
            ctx = v.device.Context(name=name)
            port_attr = ctx.query_port(config.ibverbs_port)
            ethernet = port_attr.link_layer == v.e.IBV_LINK_LAYER_ETHERNET
            gid_index = config.ibverbs_gid_index
            if gid_index is None:
                gid_index = (
                    _pick_gid_index(v, ctx, config.ibverbs_port, port_attr.gid_tbl_len)
                    if ethernet
                    else 0
                )
            gid = gid_text(ctx.query_gid(config.ibverbs_port, gid_index))
            _device = Device(
                v=v,
                name=name,
                ctx=ctx,
                pd=v.pd.PD(ctx),
                port=config.ibverbs_port,
                lid=int(port_attr.lid),
                gid=gid,
                gid_index=gid_index,
                mtu=int(port_attr.active_mtu),
                ethernet=ethernet,
            )
        return _device


# -- the owner's side (served by the data-plane server) ---------------------------------


def owner_connect(
    region: Region, args: dict[str, Any], resources: ConnectionResources
) -> dict[str, Any]:
    """Register ``region`` (once) and, if the reader sent its QP, connect a
    QP to it, held by the reader's connection (``resources``): released when
    that connection closes, and at most ``MAX_QPS_PER_CONNECTION`` of them."""
    dev = device()
    writable = not region.memory.readonly
    with dev.lock:
        mr = region.extras.get("ibv_mr")
        if mr is None:
            memory = region.memory
            mr = region.extras["ibv_mr"] = dev.register(
                memory.addr, memory.nbytes, remote=True, writable=writable
            )
            region.cleanups.append(mr.close)
    answer: dict[str, Any] = {"rkey": int(mr.rkey), "addr": region.memory.addr,
                              "writable": writable}  # fmt: skip
    peer = args.get("qp")
    if peer:
        resources.reserve(QUEUE_PAIRS, MAX_QPS_PER_CONNECTION)
        qp, cq = dev.new_qp()
        qpn = int(qp.qp_num)
        with dev.lock:
            dev.peers[qpn] = (qp, cq)
        resources.hold(QUEUE_PAIRS, lambda: _release_qp(dev, qpn))
        psn = secrets.randbits(24)
        dev.connect_qp(qp, psn, peer)
        answer["qp"] = dev.address(qp, psn)
    return answer


QUEUE_PAIRS = "ibverbs queue pairs"


def _release_qp(dev: Device, qpn: int) -> None:
    """Destroy an owner-side QP and its CQ (its reader's connection closed)."""
    with dev.lock:
        pair = dev.peers.pop(qpn, None)
    if pair is not None:
        qp, cq = pair
        qp.close()
        cq.close()


def _serve_connect(chan: Channel, request: OwnerRequest) -> None:
    answer_json(chan, owner_connect(request.registered(), request.args, request.resources))


# -- the reader's side --------------------------------------------------------------------


@dataclass
class Connection:
    """The reader's QP to one owner, and the control connection that keeps
    the owner's side of it alive."""

    qp: Any
    cq: Any
    control: Channel
    lock: threading.Lock = field(default_factory=threading.Lock)
    # (buffer id, token) -> rkey, addr, writable
    keys: dict[tuple[int, int], tuple[int, int, bool]] = field(default_factory=dict)
    broken: bool = False

    def close(self) -> None:
        """Give up the QP; closing the control connection makes the owner release its side."""
        self.control.close()
        for resource in (self.qp, self.cq):
            with contextlib.suppress(Exception):  # already destroyed with its device
                resource.close()


_connections: dict[tuple[str, int, int], Connection] = {}
_connections_lock = threading.Lock()


def _keys(answer: dict[str, Any]) -> tuple[int, int, bool]:
    return int(answer["rkey"]), int(answer["addr"]), bool(answer.get("writable", True))


def _connect(dev: Device, handle: Handle, deadline: float) -> Connection:
    """A new QP to ``handle``'s owner, over a control connection of its own."""
    qp, cq = dev.new_qp()
    psn = secrets.randbits(24)
    control = _control.dedicated(handle, deadline)
    try:
        _, answer = _control.exchange(
            control, handle, IBV_CONNECT, deadline, {"qp": dev.address(qp, psn)}
        )
        dev.connect_qp(qp, psn, answer["qp"])
    except OSError as error:  # a timeout, or an owner gone: what a user can act on
        control.close()
        raise _control.as_rdma_error(handle, error, deadline) from error
    except BaseException:
        control.close()
        raise
    conn = Connection(qp, cq, control)
    conn.keys[(handle.buffer_id, handle.token)] = _keys(answer)
    return conn


def _connection(handle: Handle, deadline: float) -> tuple[Connection, int, int, bool]:
    dev = device()
    owner = handle.owner
    key = (owner.host_key, owner.pid, owner.start_time)
    with _connections_lock:
        conn = _connections.get(key)
        if conn is not None and conn.broken:
            del _connections[key]
            conn.control.close()  # the owner releases its side of the broken QP
            conn = None
    if conn is None:
        fresh = _connect(dev, handle, deadline)
        with _connections_lock:
            conn = _connections.setdefault(key, fresh)
        if conn is not fresh:  # another thread connected meanwhile: keep one QP per owner
            fresh.close()
    keys = conn.keys.get((handle.buffer_id, handle.token))
    if keys is None:
        _, answer = _control.request(handle, IBV_CONNECT, deadline, {})
        keys = conn.keys[(handle.buffer_id, handle.token)] = _keys(answer)
    return conn, *keys


def plan(nbytes: int, chunk: int) -> list[tuple[int, int]]:
    """Work requests for ``nbytes``: (offset, length) of at most ``chunk`` each."""
    return [(start, min(chunk, nbytes - start)) for start in range(0, nbytes, chunk)]


def completion_error(v: SimpleNamespace, status: int, handle: Handle) -> Exception:
    """A failed work completion as the error a user can act on."""
    e = v.e
    owner = handle.owner
    if status in (e.IBV_WC_REM_ACCESS_ERR, e.IBV_WC_REM_INV_REQ_ERR):
        return RDMABufferDropped(
            f"the owner's NIC refused access to buffer {handle.buffer_id} (status {status}): "
            "it was dropped (RDMABuffer.drop()) or the access is out of its bounds"
        )
    if status in (e.IBV_WC_RETRY_EXC_ERR, e.IBV_WC_RNR_RETRY_EXC_ERR, e.IBV_WC_RESP_TIMEOUT_ERR):
        return RDMAOwnerGone(
            f"the owner of buffer {handle.buffer_id} (pid {owner.pid} on {owner.hostname}) "
            f"stopped answering (work completion status {status}); its process has probably exited"
        )
    return RDMATransferError(
        f"RDMA work request on buffer {handle.buffer_id} failed with completion status {status}"
    )


def _abort(v: SimpleNamespace, conn: Connection, outstanding: int) -> None:
    """Move the QP to ERR and wait for the flush of what is still posted."""
    conn.broken = True
    try:
        attr = v.qp.QPAttr(qp_state=v.e.IBV_QPS_ERR)
        conn.qp.modify(attr, v.e.IBV_QP_STATE)
    except Exception:
        pass
    end = time.monotonic() + FLUSH_WAIT
    while outstanding > 0 and time.monotonic() < end:
        n, _ = conn.cq.poll(outstanding)
        outstanding -= n
        if not n:
            time.sleep(0.0005)


class IbverbsBackend:
    """One-sided RDMA READ/WRITE on an RC queue pair per owner process."""

    name = "ibverbs"

    def available(self) -> bool:
        return available()

    def unsupported(self, handle: Handle, local: LocalMemory) -> str | None:
        if not available():
            return f"ibverbs is not available here: {why_unavailable()}"
        if not handle.owner.feature("ibverbs"):
            return "the owner has no usable ibverbs device"
        return None

    def transfer(self, t: Transfer) -> None:
        dev = device()
        conn, rkey, raddr, writable = _connection(t.handle, t.deadline)
        if t.write and not writable:  # the owner said so; its NIC would refuse it too
            raise RDMATransferError(readonly_message(t.handle.buffer_id))
        mr, cached = dev.local_mr(t.local)
        try:
            with conn.lock:
                self._run(dev.v, conn, mr, t, rkey, raddr + t.remote_offset)
        finally:
            if not cached:
                mr.close()

    @staticmethod
    def _run(
        v: SimpleNamespace, conn: Connection, mr: Any, t: Transfer, rkey: int, raddr: int
    ) -> None:
        """Post ``t``'s pieces (to the region at ``raddr``, key ``rkey``) and
        wait for their completions."""
        handle, local, write, deadline = t.handle, t.local, t.write, t.deadline
        pieces = plan(t.nbytes, get_config().chunk_bytes)
        opcode = v.e.IBV_WR_RDMA_WRITE if write else v.e.IBV_WR_RDMA_READ
        posted = done = 0
        while done < len(pieces):
            while posted < len(pieces) and posted - done < MAX_OUTSTANDING:
                offset, length = pieces[posted]
                sge = v.wr.SGE(local.addr + offset, length, mr.lkey)
                wr = v.wr.SendWR(
                    wr_id=posted,
                    opcode=opcode,
                    num_sge=1,
                    sg=[sge],
                    send_flags=v.e.IBV_SEND_SIGNALED,
                )
                wr.set_wr_rdma(rkey, raddr + offset)
                try:
                    conn.qp.post_send(wr)
                except Exception as error:
                    _abort(v, conn, posted - done)
                    raise RDMATransferError(
                        f"posting an RDMA work request failed: {error}"
                    ) from error
                posted += 1
            n, wcs = conn.cq.poll(MAX_OUTSTANDING)
            for wc in wcs[:n]:
                done += 1
                if wc.status != v.e.IBV_WC_SUCCESS:
                    _abort(v, conn, posted - done)
                    raise completion_error(v, int(wc.status), handle)
            if not n:
                if time.monotonic() > deadline:
                    _abort(v, conn, posted - done)
                    raise RDMATimeoutError(
                        f"RDMA {'write' if write else 'read'} of buffer {handle.buffer_id} "
                        "timed out"
                    )
                time.sleep(0)


def _disabled(config: _backends.Switches) -> str | None:
    return "ibverbs is disabled (disable_ibverbs=True)" if config.disable_ibverbs else None


_backends.register(
    _backends.Registration(
        IbverbsBackend(),
        rank=30,
        owner_ops={IBV_CONNECT: _serve_connect},
        advertise=lambda: {"ibverbs": available()},
        disabled=_disabled,
    )
)
