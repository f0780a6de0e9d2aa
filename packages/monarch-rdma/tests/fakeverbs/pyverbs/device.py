from . import STATE
from . import enums as e
from .addr import GID
from .pyverbs_error import PyverbsRDMAError


class _Device:
    def __init__(self, name):
        self.name = name.encode()


def get_device_list():
    if STATE["fail_list"]:
        raise PyverbsRDMAError("Failed to get devices list")  # what pyverbs does with no device
    return [_Device(name) for name in STATE["devices"]]


class PortAttr:
    lid = 0
    link_layer = e.IBV_LINK_LAYER_ETHERNET
    gid_tbl_len = 4
    active_mtu = e.IBV_MTU_1024
    state = 4


class Context:
    def __init__(self, **kwargs):
        if kwargs.get("name") not in STATE["devices"]:
            raise PyverbsRDMAError(f"device {kwargs.get('name')} not found")
        self.name = kwargs["name"]

    def query_port(self, port_num=1):
        if port_num != 1:
            raise PyverbsRDMAError(f"no port {port_num}")
        return PortAttr()

    def query_gid_type(self, port_num, index):
        return e.IBV_GID_TYPE_ROCE_V2 if index >= 2 else e.IBV_GID_TYPE_ROCE_V1

    def query_gid(self, port_num, index):
        return GID("0000:0000:0000:0000:0000:ffff:0a00:00%02x" % (index + 1))

    def close(self):
        pass
