import collections
import threading


class WC:
    def __init__(self, wr_id=0, status=0, opcode=0, byte_len=0):
        self.wr_id, self.status, self.opcode, self.byte_len = wr_id, status, opcode, byte_len


class CQ:
    def __init__(self, context, cqe, cq_context=None, channel=None, comp_vector=0):
        self.cqe = cqe
        self.entries = collections.deque()
        self.lock = threading.Lock()

    def push(self, wc):
        with self.lock:
            if len(self.entries) >= self.cqe:
                raise RuntimeError("CQ overrun")
            self.entries.append(wc)

    def poll(self, num_entries=1):
        with self.lock:
            out = [self.entries.popleft() for _ in range(min(num_entries, len(self.entries)))]
        return len(out), out

    def close(self):
        pass
