"""A software stand-in for pyverbs (rdma-core's Python bindings) with the
same module layout, class names, constructor keywords and state rules as the
parts monarch_rdma uses. Its one "NIC" lives in this process: RDMA READ and
WRITE work requests are executed with memmove after the checks a real HCA
makes (QP state, rkey, bounds, access flags), and complete on the CQ.

The names and keywords were checked against Debian's python3-pyverbs 44.0.
"""

import threading

FABRIC_LOCK = threading.Lock()
QPS: dict = {}  # qp_num -> QP
MRS: dict = {}  # rkey -> MR
STATE = {"devices": ["fake_0"], "fail_list": False, "dead": False}
