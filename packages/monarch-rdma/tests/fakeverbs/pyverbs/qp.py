import ctypes
import itertools

from . import FABRIC_LOCK, MRS, QPS, STATE
from . import enums as e
from .cq import WC
from .pyverbs_error import PyverbsRDMAError, PyverbsUserError

_numbers = itertools.count(0x100)


class QPCap:
    def __init__(self, max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1,
                 max_inline_data=0):  # fmt: skip
        self.max_send_wr, self.max_recv_wr = max_send_wr, max_recv_wr
        self.max_send_sge, self.max_recv_sge = max_send_sge, max_recv_sge


class QPInitAttr:
    def __init__(self, qp_type=e.IBV_QPT_RC, qp_context=None, scq=None, rcq=None, srq=None,
                 cap=None, sq_sig_all=1):  # fmt: skip
        self.qp_type, self.send_cq, self.recv_cq, self.cap = qp_type, scq, rcq, cap


class QPAttr:
    def __init__(self, qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET):
        self.qp_state = qp_state
        self.dest_qp_num = None
        self.qp_access_flags = 0


class QP:
    def __init__(self, creator, init_attr, qp_attr=None):
        if init_attr.send_cq is None or init_attr.cap is None:
            raise PyverbsUserError("an RC QP needs a send CQ and capabilities")
        self.pd, self.cq, self.cap = creator, init_attr.send_cq, init_attr.cap
        self.qp_num = next(_numbers)
        self.qp_state = e.IBV_QPS_RESET
        self.outstanding = 0
        self.access = 0
        if qp_attr is not None:  # pyverbs: an RC QP given attributes is returned in INIT
            self.access = qp_attr.qp_access_flags
            self.qp_state = e.IBV_QPS_INIT
        with FABRIC_LOCK:
            QPS[self.qp_num] = self

    def to_rtr(self, attr):
        if self.qp_state != e.IBV_QPS_INIT:
            raise PyverbsRDMAError("to_rtr from a state other than INIT")
        if attr.dest_qp_num is None or attr.ah_attr is None:
            raise PyverbsRDMAError("RTR needs the destination QP and address")
        self.dest, self.access = attr.dest_qp_num, attr.qp_access_flags
        self.qp_state = e.IBV_QPS_RTR

    def to_rts(self, attr):
        if self.qp_state != e.IBV_QPS_RTR:
            raise PyverbsRDMAError("to_rts from a state other than RTR")
        self.qp_state = e.IBV_QPS_RTS

    def modify(self, attr, comp_mask):
        if comp_mask & e.IBV_QP_STATE:
            self.qp_state = attr.qp_state

    def post_send(self, wr, bad_wr=None):
        if self.qp_state not in (e.IBV_QPS_RTS, e.IBV_QPS_ERR):
            raise PyverbsRDMAError("post_send on a QP that is not in RTS")
        self.cq.push(WC(wr.wr_id, self._execute(wr), wr.opcode))

    def _execute(self, wr):
        if self.qp_state == e.IBV_QPS_ERR:
            return e.IBV_WC_WR_FLUSH_ERR
        if STATE["dead"]:
            self.qp_state = e.IBV_QPS_ERR
            return e.IBV_WC_RETRY_EXC_ERR
        sge = wr.sg[0]
        with FABRIC_LOCK:
            local, remote, peer = MRS.get(sge.lkey), MRS.get(wr.rkey), QPS.get(self.dest)
        if local is None or not (
            local.buf <= sge.addr and sge.addr + sge.length <= local.buf + local.length
        ):
            self.qp_state = e.IBV_QPS_ERR
            return e.IBV_WC_LOC_ACCESS_ERR
        need = (
            e.IBV_ACCESS_REMOTE_WRITE
            if wr.opcode == e.IBV_WR_RDMA_WRITE
            else e.IBV_ACCESS_REMOTE_READ
        )
        if (
            peer is None
            or remote is None
            or remote.pd is not peer.pd
            or not remote.access & need
            or not (
                remote.buf <= wr.remote_addr
                and wr.remote_addr + sge.length <= remote.buf + remote.length
            )
        ):
            self.qp_state = e.IBV_QPS_ERR
            return e.IBV_WC_REM_ACCESS_ERR
        if wr.opcode == e.IBV_WR_RDMA_WRITE:
            ctypes.memmove(wr.remote_addr, sge.addr, sge.length)
        else:
            ctypes.memmove(sge.addr, wr.remote_addr, sge.length)
        return e.IBV_WC_SUCCESS

    def close(self):
        with FABRIC_LOCK:
            QPS.pop(self.qp_num, None)
