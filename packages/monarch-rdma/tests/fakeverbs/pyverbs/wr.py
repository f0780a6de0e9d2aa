class SGE:
    def __init__(self, addr, length, lkey):
        self.addr, self.length, self.lkey = addr, length, lkey


class SendWR:
    def __init__(self, wr_id=0, opcode=0, num_sge=1, imm_data=0, sg=None, send_flags=0):
        self.wr_id, self.opcode, self.num_sge = wr_id, opcode, num_sge
        self.sg, self.send_flags = sg, send_flags
        self.rkey = self.remote_addr = None

    def set_wr_rdma(self, rkey, addr):
        self.rkey, self.remote_addr = rkey, addr
