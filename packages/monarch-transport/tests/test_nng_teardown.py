"""How the nng backend ends: a connection's goodbye ends when its listener
goes, and at interpreter exit nng is torn down only after every thread that
was inside a blocking nng call has left it. Torn down under such a thread,
nng panics (SIGABRT) or its teardown hangs; both were seen at the end of a
controller whose connection was still saying goodbye."""

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from monarch_transport import (
    Address,
    AuthenticationError,
    Settings,
    _nng,
    connect,
    encode,
    job_secret,
)

LISTENER = """
    import asyncio, sys
    from monarch_transport import listen

    async def main():
        async with await listen(sys.argv[1]) as inbox:
            print("listening", flush=True)
            while True:
                await inbox.receive()

    asyncio.run(main())
"""


@contextlib.contextmanager
def listening(source: str, address: str) -> Iterator[subprocess.Popen[str]]:
    """A process running ``source`` (a listener at ``address``), once it says
    it listens; killed at the end."""
    listener = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(source), address],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None and listener.stdout.readline() == "listening\n"
        yield listener
    finally:
        listener.kill()
        listener.wait()


def test_a_goodbye_ends_when_the_listener_dies_instead_of_waiting_for_its_answer(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(_nng, "BYE_TIMEOUT_MS", 600_000)  # waiting it out fails the test
    monkeypatch.setenv("MONARCH_TRANSPORT", "nng")
    job_secret()  # made and exported: the listener's process shares it
    address = f"ipc://{tmp_path}/listener"
    with listening(LISTENER, address) as listener:

        async def main() -> None:
            out = await connect(address)
            assert type(out).__name__ == "NngSender"
            await out.send(encode("hello"))
            os.kill(listener.pid, signal.SIGSTOP)  # it will not answer the goodbye
            closing = asyncio.ensure_future(out.aclose())
            await asyncio.sleep(0.2)
            assert not closing.done()  # waiting for the answer
            os.kill(listener.pid, signal.SIGKILL)
            await asyncio.wait_for(closing, 30)

        asyncio.run(main())


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


def test_every_goodbye_is_answered_when_many_come_at_once_at_exit(tmp_path, monkeypatch):
    """A job's procs all say goodbye to the controller as it ends. Its
    listener answers each at once, without the worker thread an exiting
    interpreter no longer gives (an answer that needed one was dropped, and
    its sender waited out the goodbye: 2 s more at the end of a job)."""
    monkeypatch.setattr(_nng, "BYE_TIMEOUT_MS", 600_000)  # a dropped answer fails the test
    monkeypatch.setattr(_nng, "_in_worker", lambda loop, work: False)  # as at exit

    async def main() -> None:
        settings = Settings(secret=b"s" * 32)
        transport = _nng.NngTransport()
        inbox = await transport.listen(Address.parse(f"ipc://{tmp_path}/l"), settings)
        senders = [await transport.connect(inbox.address, settings) for _ in range(16)]
        await asyncio.wait_for(asyncio.gather(*(s.aclose() for s in senders)), 30)
        await inbox.aclose()

    asyncio.run(main())


SILENT_LISTENER = """
    import sys, pynng

    with pynng.Pair1(listen=sys.argv[1]) as sock:
        print("listening", flush=True)
        sock.recv()  # the dialer's HELLO, never answered
        print("heard", flush=True)
        sock.recv()
"""


def test_a_dial_whose_listener_dies_in_the_handshake_ends_at_once(tmp_path):
    """nng would wait for a redial until the handshake's deadline, holding up
    a process that dialed a peer ending with the job (4 s at a job's end)."""
    address = f"ipc://{tmp_path}/silent"
    with listening(SILENT_LISTENER, address) as listener:

        async def main() -> None:
            settings = Settings(secret=b"s" * 32, handshake_timeout=600.0)
            dialing = asyncio.ensure_future(
                _nng.NngTransport().connect(Address.parse(address), settings)
            )
            assert listener.stdout is not None
            assert await asyncio.to_thread(listener.stdout.readline) == "heard\n"
            listener.kill()
            with pytest.raises(AuthenticationError, match="closed the connection"):
                await asyncio.wait_for(dialing, 30)

        asyncio.run(main())
