"""Backend and address-kind selection is configuration: environment or one
early call, never a change to the code that sends."""

import subprocess
import sys
import textwrap

import pytest

from monarch_transport import AddressError, ChannelTransport, TransportError
from monarch_transport._registry import choosable


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )


SEND_ONE = """
    import asyncio
    from monarch_transport import listen, connect, transport_for, decode, encode, {extra}

    async def main():
        {setup}
        async with await listen({address}) as inbox:
            async with await connect(inbox.address) as out:
                await out.send(encode("ping"))
                event = await inbox.receive()
                name = transport_for(inbox.address).name
                print(name, inbox.address.scheme, decode(event.frames)[1])

    asyncio.run(main())
"""


@pytest.mark.parametrize("backend", choosable())
def test_environment_picks_the_backend(backend):
    done = run(
        SEND_ONE.format(extra="Address", setup="", address='"tcp://127.0.0.1:0"'),
        MONARCH_TRANSPORT=backend,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [backend, "tcp", "ping"]


def test_enable_transport_picks_backend_and_address_kind():
    code = SEND_ONE.format(
        extra="enable_transport",
        setup='enable_transport("socket"); enable_transport("ipc")',
        address="",
    )
    done = run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["socket", "ipc", "ping"]


def test_inproc_addresses_stay_in_process():
    done = run(
        SEND_ONE.format(extra="Address", setup="", address='"inproc://here"'),
        MONARCH_TRANSPORT="socket",
    )
    assert done.stdout.split() == ["inproc", "inproc", "ping"], done.stderr


@pytest.mark.parametrize(
    ("setup", "env", "expected"),
    [
        ('prefer_backend("socket")', {}, "socket"),
        ('prefer_backend("socket")', {"MONARCH_TRANSPORT": "nng"}, "nng"),
        ('enable_transport("nng"); prefer_backend("socket")', {}, "nng"),
    ],
)
def test_a_preferred_backend_yields_to_configuration(setup, env, expected):
    code = SEND_ONE.format(
        extra="prefer_backend, enable_transport", setup=setup, address='"tcp://127.0.0.1:0"'
    )
    clean = env or {"MONARCH_TRANSPORT": ""}  # empty counts as unset
    done = run(code, **clean)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == expected


def test_enable_transport_after_use_is_an_error():
    code = """
        import asyncio
        from monarch_transport import enable_transport, listen
        async def main():
            inbox = await listen("tcp://127.0.0.1:0")
            await inbox.aclose()
        asyncio.run(main())
        try:
            enable_transport("socket")
        except RuntimeError as error:
            print(error)
    """
    done = run(code)
    assert "must be called before any other calls" in done.stdout, done.stderr


def test_bad_choices_are_clear_errors():
    done = run(
        SEND_ONE.format(extra="Address", setup="", address='"tcp://127.0.0.1:0"'),
        MONARCH_TRANSPORT="carrier-pigeon",
    )
    assert "MONARCH_TRANSPORT='carrier-pigeon' is not a transport" in done.stderr
    assert issubclass(AddressError, ValueError) and issubclass(AddressError, TransportError)
    with pytest.raises(AddressError, match="unknown channel transport"):
        ChannelTransport.from_name("smoke-signals")


TOY = """
    import asyncio
    from monarch_transport import (
        ConnectError, Transport, enable_transport, listen, register_backend, transport_for,
    )

    class Toy(Transport):
        name = "toy"

        async def listen(self, address, settings):
            print("toy listens on", address)
            raise SystemExit(0)

        async def connect(self, address, settings):
            raise ConnectError("the toy transport reaches nothing")

    register_backend(Toy)
    {setup}
    print(type(transport_for("tcp://127.0.0.1:0")).__name__)
    asyncio.run(listen("tcp://127.0.0.1:0"))
"""


@pytest.mark.parametrize(
    ("setup", "env"),
    [("", {"MONARCH_TRANSPORT": "toy"}), ('enable_transport("toy")', {})],
)
def test_a_backend_registered_from_outside_is_selectable_by_name(setup, env):
    done = run(TOY.format(setup=setup), **(env or {"MONARCH_TRANSPORT": ""}))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["Toy", "toy listens on tcp://127.0.0.1:0"]


UNKNOWN = """
    from monarch_transport import (
        Transport, TransportError, enable_transport, prefer_backend, transport_for
    )
    from monarch_transport._registry import register_backend

    class Toy(Transport):  # never made: only its name counts here
        name = "toy"

    register_backend(Toy)
    for attempt in (
        lambda: prefer_backend("carrier-pigeon"),
        lambda: transport_for("tcp://h:1"),
        lambda: enable_transport("carrier-pigeon"),
    ):
        try:
            attempt()
        except TransportError as error:
            print(error)
"""


def test_an_unknown_backend_is_an_error_naming_every_registered_one():
    done = run(UNKNOWN, MONARCH_TRANSPORT="carrier-pigeon")
    assert done.returncode == 0, done.stderr
    choices = "use one of ['nng', 'socket', 'toy']"  # inproc serves inproc:// only: no choice
    lines = done.stdout.splitlines()
    assert lines[:2] == [
        f"'carrier-pigeon' is not a transport; {choices}",
        f"MONARCH_TRANSPORT='carrier-pigeon' is not a transport; {choices}",
    ]
    assert lines[2].startswith("unknown channel transport 'carrier-pigeon'; use one of [")
    assert lines[2].endswith("or a transport backend, one of ['nng', 'socket', 'toy']")


def test_a_name_is_registered_once():
    code = """
        from monarch_transport import TransportError
        from monarch_transport._nng import NngTransport
        from monarch_transport._registry import register_backend
        from monarch_transport._socket import SocketTransport

        class Impostor(SocketTransport):
            name = "nng"

        register_backend(NngTransport)  # the same class again: harmless
        try:
            register_backend(Impostor)
        except TransportError as error:
            print(error)
    """
    done = run(code)
    assert done.stdout.strip() == (
        "transport backend 'nng' is registered already, by monarch_transport._nng.NngTransport"
    ), done.stderr


def test_nng_is_offered_from_the_start_but_loaded_when_first_chosen():
    # loading pynng costs every process milliseconds at start, and the actor
    # runtime runs on the socket backend
    done = run(
        """
        import sys, monarch_transport as t
        from monarch_transport._registry import choosable
        assert 'pynng' not in sys.modules and 'monarch_transport._nng' not in sys.modules
        assert choosable() == ['nng', 'socket'], choosable()
        assert t.backend_class('nng').__name__ == 'NngTransport'
        assert 'pynng' in sys.modules
        """
    )
    assert done.returncode == 0, done.stderr


def test_what_sealing_takes_loads_when_first_needed_or_when_preloaded():
    # loading cryptography costs a process about 10 ms: never for Unix sockets
    # alone; ahead of time, by preload_integrity, where TCP will need it
    done = run(
        """
        import sys, monarch_transport as t
        assert not [m for m in sys.modules if m.startswith('cryptography')]
        t.preload_integrity()
        assert 'cryptography.hazmat.primitives.kdf.hkdf' in sys.modules
        assert 'cryptography.hazmat.primitives.ciphers.aead' in sys.modules
        """
    )
    assert done.returncode == 0, done.stderr


def test_the_event_loop_module_loads_when_a_loop_is_made_or_when_preloaded():
    # a fork server imports it before it forks, so that no proc imports it again
    done = run(
        """
        import sys, monarch_transport as t
        assert 'uvloop' not in sys.modules
        t.preload_event_loop()
        assert 'uvloop' in sys.modules
        assert type(t.new_event_loop()).__module__.startswith('uvloop')
        """
    )
    assert done.returncode == 0, done.stderr
