import ipaddress

from .pyverbs_error import PyverbsUserError


class GID:
    def __init__(self, val=None):
        if val is not None:
            parts = val.split(":")
            if len(parts) != 8 or any(len(p) != 4 for p in parts):
                raise PyverbsUserError(f"Invalid GID value ({parts})")  # as pyverbs
        self.gid = val or "0000:0000:0000:0000:0000:0000:0000:0000"


class GlobalRoute:
    def __init__(self, dgid=None, flow_label=0, sgid_index=0, hop_limit=1, traffic_class=0):
        self.dgid, self.sgid_index = dgid, sgid_index


class AHAttr:
    def __init__(self, dlid=0, sl=0, src_path_bits=0, static_rate=0, is_global=0, port_num=1,
                 gr=None):  # fmt: skip
        self.dlid, self.is_global, self.port_num, self.gr = dlid, is_global, port_num, gr
        if is_global:
            ipaddress.IPv6Address(gr.dgid.gid)
