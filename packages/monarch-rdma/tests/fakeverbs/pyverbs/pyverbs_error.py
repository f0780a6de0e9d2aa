class PyverbsError(Exception):
    pass


class PyverbsRDMAError(PyverbsError):
    pass


class PyverbsUserError(PyverbsError):
    pass
