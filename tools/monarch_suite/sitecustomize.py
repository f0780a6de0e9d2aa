# Every process of a suite run (pytest, the subprocesses Monarch's tests start, the
# job's processes) resolves Monarch's internal imports the same way.
import internals

internals.install()
