"""Backend and address-kind selection is configuration: environment or one
early call, never a change to the code that sends."""

import subprocess
import sys
import textwrap

import pytest

from monarch_transport import AddressError, ChannelTransport, TransportError
from monarch_transport._select import BACKENDS


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


@pytest.mark.parametrize("backend", sorted(BACKENDS))
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
