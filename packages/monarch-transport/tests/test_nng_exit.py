"""The nng backend at interpreter exit: nng is torn down only after every
thread that was inside a blocking nng call has left it. Torn down under such
a thread, nng panics (SIGABRT) or its teardown hangs; both were seen at the
end of a controller whose connection was still saying goodbye."""

import subprocess
import sys
import textwrap

BLOCKED_AT_EXIT = """
    import sys, threading, time
    import pynng
    from monarch_transport import _nng

    listening = pynng.Pair1()
    listening.listen("ipc://{folder}/sock")
    dialed = _nng._opened(recv_max_size=1 << 16)
    dialed.dial("ipc://{folder}/sock", block=True)
    receiving = threading.Event()

    def blocked():
        receiving.set()
        try:
            dialed.recv()  # nobody sends: only the exit's close wakes it
        except pynng.Closed:
            pass
        time.sleep(0.3)  # still unwinding when an unguarded exit has long finished
        try:
            _nng._inside_nng(lambda: None)
            note = "a call entered while nng was being torn down"
        except pynng.Closed:
            note = "left nng; later calls refused"
        with open("{folder}/note", "w") as f:
            f.write(note)

    threading.Thread(target=_nng._inside_nng, args=(blocked,), daemon=True).start()
    receiving.wait()
    sys.exit(0)  # with the thread blocked in nng_recv
"""


def test_the_exit_waits_for_a_thread_blocked_in_nng_then_tears_nng_down(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKED_AT_EXIT.format(folder=tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "note").read_text() == "left nng; later calls refused"
