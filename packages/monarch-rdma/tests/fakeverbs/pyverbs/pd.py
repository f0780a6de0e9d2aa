class PD:
    def __init__(self, creator):
        self.ctx = creator

    def close(self):
        pass
