import itertools

from . import FABRIC_LOCK, MRS

_keys = itertools.count(0x1000)


class MR:
    def __init__(self, creator, length, access, address=None, **kwargs):
        if address is None:
            raise ValueError("the fake registers existing memory only")
        self.pd, self.length, self.access, self.buf = creator, length, access, address
        self.lkey = self.rkey = next(_keys)
        self.closed = False
        with FABRIC_LOCK:
            MRS[self.rkey] = self

    def close(self):
        with FABRIC_LOCK:
            MRS.pop(self.rkey, None)
        self.closed = True
