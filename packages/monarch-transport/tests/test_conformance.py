"""One suite, every backend and address family: what a transport promises."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from monarch_transport import (
    Address,
    AuthenticationError,
    ConnectError,
    MessageTooLarge,
    PeerDisconnected,
    PeerLeft,
    Received,
    Settings,
    new_event_loop,
)
from monarch_transport.testing import until

pytestmark = pytest.mark.anyio
SECRET = b"s" * 32


def settings(**kw):
    return Settings(**{"secret": SECRET, **kw})


async def next_event(listener, timeout=5.0):
    return await asyncio.wait_for(listener.receive(), timeout)


async def test_frames_arrive_intact_and_in_order(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        if inbox.address.scheme == "tcp":
            assert inbox.address.port != 0  # the real, ephemeral port
        async with await transport.connect(inbox.address, settings(name="alice")) as out:
            messages = [[b"head", b"x" * n] for n in range(50)] + [[], [b""], [b"a", b"", b"c"]]
            for frames in messages:
                await out.send(frames)
            for frames in messages:
                event = await next_event(inbox)
                assert isinstance(event, Received)
                assert event.peer.name == "alice"
                assert [bytes(f) for f in event.frames] == frames


async def test_send_nowait_keeps_order_with_send(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            taken = 0
            for n in range(200):
                frames = [b"%d" % n, b"y" * (n % 7)]
                if n % 3 and out.send_nowait(frames):
                    taken += 1
                else:
                    await out.send(frames)
            for n in range(200):
                event = await next_event(inbox)
                assert bytes(event.frames[0]) == b"%d" % n
            if transport.name != "inproc":
                assert taken > 0, "small messages to an idle connection go out without waiting"


async def test_send_many_nowait_keeps_order(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            messages = [[b"%d" % n, b"z" * (70_000 if n == 5 else n)] for n in range(12)]
            sent = out.send_many_nowait(messages)
            assert 0 <= sent <= len(messages)
            for frames in messages[sent:]:
                await out.send(frames)
            for n in range(12):
                event = await next_event(inbox)
                assert bytes(event.frames[0]) == b"%d" % n
                assert len(event.frames[1]) == len(messages[n][1])


async def test_send_threadsafe_keeps_order_with_the_loops_sends(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            messages = [[b"%d" % n, bytes([n % 251]) * (n * 7919 % 50_000)] for n in range(600)]

            async def collect():
                return [await next_event(inbox, 20.0) for _ in messages]

            received = asyncio.get_running_loop().create_task(collect())

            def burst(start):  # another thread writes until the connection pushes back
                sent = 0
                while start + sent < len(messages) and sent < 40:
                    if not out.send_threadsafe(messages[start + sent]):
                        break
                    sent += 1
                return sent

            position = from_threads = 0
            while position < len(messages):
                sent = await asyncio.to_thread(burst, position)
                from_threads += sent
                position += sent
                if position < len(messages):  # the loop's way, in between
                    await out.send(messages[position])
                    position += 1
            events = await received
            assert [[bytes(f) for f in e.frames] for e in events] == messages
            # inproc has no thread-safe way, and a TLS stream's state lives in the loop
            if transport.name == "inproc" or (
                transport.name == "socket" and "tls" in str(inbox.address)
            ):
                assert from_threads == 0
            else:
                assert from_threads > 0


async def test_a_thread_and_the_loop_sending_at_once_never_mix_their_bytes(backend, monkeypatch):
    # near-full kernel buffers make a thread's direct write partial (here,
    # every one of them): what is left must go out before anything the loop
    # or another thread sends meanwhile
    import monarch_transport._socket as socket_backend

    write = os.write

    def partial(fd: int, data: bytes) -> int:
        return write(fd, memoryview(data)[: max(1, len(data) // 3)])

    monkeypatch.setattr(socket_backend.os, "write", partial)
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            loop = asyncio.get_running_loop()
            count = 150
            thread_messages = [
                [b"t%d" % n, bytes([n % 251]) * (20_000 + n * 211)] for n in range(count)
            ]
            loop_messages = [
                [b"l%d" % n, bytes([n % 241]) * (30_000 + n * 97)] for n in range(count)
            ]

            def from_a_thread(messages: list[list[bytes]]) -> None:
                for frames in messages:
                    if not out.send_threadsafe(frames):
                        asyncio.run_coroutine_threadsafe(out.send(frames), loop).result(30)

            async def from_the_loop() -> None:
                for frames in loop_messages:
                    if not out.send_nowait(frames):
                        await out.send(frames)
                    await asyncio.sleep(0)  # the thread writes in between

            other_messages = [
                [b"o%d" % n, bytes([n % 239]) * (10_000 + n * 307)] for n in range(count)
            ]
            sending = asyncio.gather(
                asyncio.to_thread(from_a_thread, thread_messages),
                asyncio.to_thread(from_a_thread, other_messages),
                from_the_loop(),
            )
            events = [await next_event(inbox, 30.0) for _ in range(3 * count)]
            await sending
            got = [[bytes(f) for f in e.frames] for e in events]
            assert [m for m in got if m[0].startswith(b"t")] == thread_messages
            assert [m for m in got if m[0].startswith(b"o")] == other_messages
            assert [m for m in got if m[0].startswith(b"l")] == loop_messages


class Collected(list):
    """A handler's events (``append`` is the handler); ``departed`` is set
    by the first ``PeerLeft``."""

    def __init__(self):
        super().__init__()
        self.departed = asyncio.Event()

    def append(self, event):
        super().append(event)
        if isinstance(event, PeerLeft):
            self.departed.set()


async def until_departed(events):
    """Wait (on the loop) until a handler has collected a ``PeerLeft``."""
    await asyncio.wait_for(events.departed.wait(), 10)


def assert_handled(events, count, name):
    """``count`` numbered messages, in order, then the sender's departure."""
    received = [bytes(e.frames[0]) for e in events if isinstance(e, Received)]
    assert received == [b"%d" % n for n in range(count)]
    assert isinstance(events[-1], PeerLeft) and events[-1].peer.name == name


async def test_deliver_to_hands_every_event_to_a_handler(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        events = Collected()
        inbox.deliver_to(events.append)
        out = await transport.connect(inbox.address, settings(name="bob"))
        for n in range(30):
            await out.send([b"%d" % n])
        await out.aclose()
        await until_departed(events)
    assert_handled(events, 30, "bob")


@pytest.mark.parametrize("loop_kind", ["asyncio", "uvloop"])
def test_deliver_to_before_the_loop_runs(backend, loop_kind):
    """A process may set its listener up, hand it a handler and only then
    start serving: the actor runtime's procs do exactly that."""
    transport, address = backend
    loop = new_event_loop() if loop_kind == "uvloop" else asyncio.new_event_loop()
    events = Collected()

    async def start():
        inbox = await transport.listen(address(), settings())
        out = await transport.connect(inbox.address, settings(name="carol"))
        for n in range(3):
            await out.send([b"%d" % n])
        # they arrive (wait in the listener's queue) before there is a handler
        assert await until(lambda: len(inbox._queue._items) == 3)
        return inbox, out

    async def finish():
        for n in range(3, 6):
            await out.send([b"%d" % n])
        await out.aclose()
        await until_departed(events)
        await inbox.aclose()

    try:
        inbox, out = loop.run_until_complete(start())
        inbox.deliver_to(events.append)  # the loop is not running now
        loop.run_until_complete(finish())
    finally:
        loop.close()
    assert_handled(events, 6, "carol")


async def test_large_message(backend):
    transport, address = backend
    payload = os.urandom(8 << 20)
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            sent = asyncio.create_task(out.send([b"h", payload, payload[:1000]]))
            event = await next_event(inbox, 20)
            await sent
            assert bytes(event.frames[1]) == payload
            assert bytes(event.frames[2]) == payload[:1000]


async def test_ordering_under_concurrent_senders(backend):
    transport, address = backend
    count, senders = 300, 4
    async with await transport.listen(address(), settings()) as inbox:
        outs = [
            await transport.connect(inbox.address, settings(name=f"s{i}")) for i in range(senders)
        ]

        async def blast(i, out):
            for seq in range(count):
                await out.send([f"{i}:{seq}".encode()])

        tasks = [asyncio.create_task(blast(i, out)) for i, out in enumerate(outs)]
        seen = {f"s{i}": [] for i in range(senders)}
        for _ in range(count * senders):
            event = await next_event(inbox)
            seen[event.peer.name].append(int(bytes(event.frames[0]).split(b":")[1]))
        await asyncio.gather(*tasks)
        assert all(seqs == list(range(count)) for seqs in seen.values())
        assert len({event_peer for event_peer in seen}) == senders
        for out in outs:
            await out.aclose()


async def test_each_connection_is_a_distinct_peer(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        a = await transport.connect(inbox.address, settings(name="same"))
        b = await transport.connect(inbox.address, settings(name="same"))
        await a.send([b"1"])
        await b.send([b"2"])
        peers = {(await next_event(inbox)).peer for _ in range(2)}
        assert len(peers) == 2
        await a.aclose()
        await b.aclose()


async def test_too_large_to_send(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        async with await transport.connect(inbox.address, settings(max_message_size=1024)) as out:
            with pytest.raises(MessageTooLarge, match="exceeds the maximum of 1,024 bytes"):
                await out.send([b"x" * 1025])
            await out.send([b"still fine"])
            assert bytes((await next_event(inbox)).frames[0]) == b"still fine"


async def test_too_large_to_receive_drops_only_that_peer(wire_backend):
    # (inproc checks sizes on the sending side only: one process, one limit)
    transport, address = wire_backend
    async with await transport.listen(address(), settings(max_message_size=4096)) as inbox:
        good = await transport.connect(inbox.address, settings(name="good"))
        greedy = await transport.connect(inbox.address, settings(name="greedy"))
        await greedy.send([b"x" * 100_000])
        event = await next_event(inbox)
        assert isinstance(event, PeerLeft)
        assert event.peer.name == "greedy"
        await good.send([b"ok"])
        event = await next_event(inbox)
        assert (event.peer.name, bytes(event.frames[0])) == ("good", b"ok")
        await asyncio.wait_for(greedy.wait_closed(), 2)
        await good.aclose()


async def test_wrong_secret_is_refused_and_others_unaffected(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        good = await transport.connect(inbox.address, settings(name="good"))
        with pytest.raises(AuthenticationError, match="secret"):
            await transport.connect(inbox.address, Settings(secret=b"w" * 32, name="intruder"))
        await good.send([b"after"])
        event = await next_event(inbox)
        assert (event.peer.name, bytes(event.frames[0])) == ("good", b"after")
        await good.aclose()
        assert isinstance(await next_event(inbox), PeerLeft)


async def test_a_peer_of_another_job_is_logged_as_one(wire_backend, caplog):
    """The client finds the listener's proof wrong and says so before it
    closes: the listener's log names the cause, not a mere departure."""
    transport, address = wire_backend
    async with await transport.listen(address(), settings()) as inbox:
        with pytest.raises(AuthenticationError, match="secret"):
            await transport.connect(inbox.address, Settings(secret=b"w" * 32, name="other"))
        assert await until(lambda: "holds another secret" in caplog.text, 5)


async def test_a_peer_that_ends_in_its_handshake_is_not_logged_as_refused(
    wire_backend, caplog, monkeypatch
):
    """A process that ends between its HELLO and its PROOF (a proc killed at
    the end of a job) is no news: nothing is logged above debug."""
    import monarch_transport._auth as auth

    caplog.set_level(logging.DEBUG, logger="monarch.transport")
    transport, address = wire_backend
    async with await transport.listen(address(), settings()) as inbox:

        def leave(self, kind, payload):  # the listener has our HELLO: we go
            raise ConnectionAbortedError("this process ended")

        monkeypatch.setattr(auth.ClientHandshake, "answer", leave)
        with pytest.raises(ConnectionAbortedError):
            await transport.connect(inbox.address, settings(name="ending"))
        assert await until(lambda: "during its handshake" in caplog.text, 5)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_closing_a_sender_is_noticed_within_a_second(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        out = await transport.connect(inbox.address, settings(name="leaver"))
        await out.send([b"last words"])
        await out.aclose()
        assert bytes((await next_event(inbox)).frames[0]) == b"last words"  # data first
        start = time.monotonic()
        event = await next_event(inbox)
        assert isinstance(event, PeerLeft)
        assert event.peer.name == "leaver"
        assert time.monotonic() - start < 1.0
        with pytest.raises(PeerDisconnected):
            await out.send([b"too late"])


async def test_closing_the_listener_is_noticed_by_senders(backend):
    transport, address = backend
    inbox = await transport.listen(address(), settings())
    out = await transport.connect(inbox.address, settings())
    start = time.monotonic()
    await inbox.aclose()
    reason = await asyncio.wait_for(out.wait_closed(), 1.0)
    assert "closed" in reason
    assert time.monotonic() - start < 1.0
    assert out.closed
    with pytest.raises(PeerDisconnected, match="gone"):
        await out.send([b"x"])


async def test_connecting_to_nothing_is_a_clear_error(backend):
    transport, address = backend
    target = address()
    if target.scheme == "tcp":
        probe = await transport.listen(target, settings())
        target = probe.address
        await probe.aclose()
    with pytest.raises(ConnectError, match="cannot connect"):
        await transport.connect(target, settings(handshake_timeout=2.0))


async def test_reconnect_after_the_listener_restarts(backend):
    transport, address = backend
    first = await transport.listen(address(), settings())
    where = first.address
    out = await transport.connect(where, settings())
    await out.send([b"one"])
    assert bytes((await next_event(first)).frames[0]) == b"one"
    await first.aclose()
    await asyncio.wait_for(out.wait_closed(), 2)
    second = await transport.listen(where, settings())  # same address, new listener
    again = await transport.connect(where, settings())
    await again.send([b"two"])
    assert bytes((await next_event(second)).frames[0]) == b"two"
    await again.aclose()
    await second.aclose()


async def test_slow_consumer_slows_the_sender(backend):
    transport, address = backend
    chunk = b"x" * (1 << 20)
    total = 200  # 200 MiB if nothing pushed back
    async with await transport.listen(address(), settings(queue_depth=4)) as inbox:
        async with await transport.connect(inbox.address, settings()) as out:
            sent = 0

            async def produce():
                nonlocal sent
                for _ in range(total):
                    await out.send([chunk])
                    sent += 1

            producer = asyncio.create_task(produce())
            done, _ = await asyncio.wait([producer], timeout=1.0)  # it must not finish
            assert not done and sent < total, (
                "the sender never waited for a consumer that does not read"
            )
            for _ in range(total):
                assert len((await next_event(inbox, 20)).frames[0]) == len(chunk)
            await asyncio.wait_for(producer, 20)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from monarch_transport import Address, Settings
    from monarch_transport._registry import backend_class

    async def main():
        transport = backend_class(sys.argv[1])()
        settings = Settings(secret=b"s" * 32, name="child")
        out = await transport.connect(Address.parse(sys.argv[2]), settings)
        await out.send([b"hello from the child"])
        print("sent", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


async def test_a_killed_peer_is_noticed_within_a_second(wire_backend):
    transport, address = wire_backend
    async with await transport.listen(address(), settings()) as inbox:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, transport.name, str(inbox.address)],
            stdout=subprocess.PIPE,
        )
        try:
            event = await next_event(inbox, 30)
            assert bytes(event.frames[0]) == b"hello from the child"
            os.kill(child.pid, signal.SIGKILL)
            start = time.monotonic()
            left = await next_event(inbox, 5)
            assert isinstance(left, PeerLeft)
            assert left.peer == event.peer
            assert time.monotonic() - start < 1.0
        finally:
            child.kill()
            child.wait()


EXITING_CHILD = textwrap.dedent(
    """
    import asyncio, atexit, sys, threading
    from monarch_transport import Address, Settings, new_event_loop
    from monarch_transport._registry import backend_class

    transport = backend_class(sys.argv[1])()
    loop = new_event_loop()  # served by a thread, the way a controller runs its runtime
    threading.Thread(target=loop.run_forever, daemon=True).start()
    settings = Settings(secret=b"s" * 32)
    connecting = transport.connect(Address.parse(sys.argv[2]), settings)
    out = asyncio.run_coroutine_threadsafe(connecting, loop).result()

    def linger():  # the listener goes away while this interpreter is finishing
        print("exiting", flush=True)
        asyncio.run_coroutine_threadsafe(out.wait_closed(), loop).result(10)
        print("noticed", flush=True)

    atexit.register(linger)
    """
)


async def test_a_listener_lost_while_the_interpreter_exits_is_quiet(wire_backend):
    """Processes end while their peers end too: losing a connection during
    interpreter shutdown must not fail (worker threads are gone by then)."""
    transport, address = wire_backend
    inbox = await transport.listen(address(), settings())
    child = subprocess.Popen(
        [sys.executable, "-c", EXITING_CHILD, transport.name, str(inbox.address)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = await asyncio.to_thread(child.stdout.readline)
        assert line == "exiting\n", child.stderr.read()
        await inbox.aclose()
        out, err = await asyncio.to_thread(child.communicate, timeout=30)
    finally:
        child.kill()
    assert out == "noticed\n", err
    assert child.returncode == 0 and "Traceback" not in err, err


async def test_aborting_a_connection_ends_it_for_both_sides_with_the_reason(backend):
    transport, address = backend
    async with await transport.listen(address(), settings()) as inbox:
        out = await transport.connect(inbox.address, settings(name="quitter"))
        await out.send([b"before"])
        assert bytes((await next_event(inbox)).frames[0]) == b"before"
        await out.abort("the peer was declared lost")
        assert out.closed
        assert await asyncio.wait_for(out.wait_closed(), 1) == "the peer was declared lost"
        with pytest.raises(PeerDisconnected, match="declared lost"):
            await out.send([b"after"])
        left = await next_event(inbox)
        assert isinstance(left, PeerLeft) and left.peer.name == "quitter"
        await out.aclose()  # closing what is cut already does nothing


LISTENING_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from monarch_transport import Address, Settings
    from monarch_transport._registry import backend_class

    async def main():
        transport = backend_class(sys.argv[1])()
        inbox = await transport.listen(Address.parse(sys.argv[2]), Settings(secret=b"s" * 32))
        print(inbox.address, flush=True)
        async for _ in inbox:
            pass

    asyncio.run(main())
    """
)


async def test_aborting_a_connection_to_a_stopped_peer_does_not_wait_for_it(wire_backend):
    """A peer declared lost may be stopped, not dead: an abort neither hands
    it anything nor waits for its answer, as a goodbye would."""
    transport, address = wire_backend
    child = subprocess.Popen(
        [sys.executable, "-c", LISTENING_CHILD, transport.name, str(address())],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        where = Address.parse((await asyncio.to_thread(child.stdout.readline)).strip())
        out = await transport.connect(where, settings())
        await out.send([b"hello"])
        os.kill(child.pid, signal.SIGSTOP)
        start = time.monotonic()
        await asyncio.wait_for(out.abort("declared lost"), 5)
        assert time.monotonic() - start < 1.0
        assert out.closed
    finally:
        child.kill()
        child.wait()
