import os

import pytest

from monarch_transport import Address, AddressError, ChannelTransport


@pytest.mark.parametrize(
    ("text", "canonical", "parts"),
    [
        ("tcp://127.0.0.1:5000", "tcp://127.0.0.1:5000", ("tcp", "127.0.0.1", 5000, "")),
        ("tcp://localhost:0", "tcp://localhost:0", ("tcp", "localhost", 0, "")),
        ("tcp://[::1]:80", "tcp://[::1]:80", ("tcp", "::1", 80, "")),
        (
            "TCP://host-1.example:65535",
            "tcp://host-1.example:65535",
            ("tcp", "host-1.example", 65535, ""),
        ),
        ("ipc:///tmp/a.sock", "ipc:///tmp/a.sock", ("ipc", "", 0, "/tmp/a.sock")),
        ("unix:///tmp/a.sock", "ipc:///tmp/a.sock", ("ipc", "", 0, "/tmp/a.sock")),
        ("ipc://relative.sock", "ipc://relative.sock", ("ipc", "", 0, "relative.sock")),
        ("inproc://actors", "inproc://actors", ("inproc", "", 0, "actors")),
    ],
)
def test_parse_and_format(text, canonical, parts):
    address = Address.parse(text)
    assert (address.scheme, address.host, address.port, address.path) == parts
    assert str(address) == canonical
    assert Address.parse(str(address)) == address
    assert Address.parse(address) is address


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("127.0.0.1:5000", "has no scheme"),
        ("http://x:1", "unknown scheme 'http'"),
        ("tcp://127.0.0.1", "needs a host and a port"),
        ("tcp://:5000", "needs a host and a port"),
        ("tcp://127.0.0.1:70000", "port must be a number from 0 to 65535"),
        ("tcp://127.0.0.1:http", "port must be a number"),
        ("tcp://::1:80", "put an IPv6 host in brackets"),
        ("tcp://[::1]80", r"write IPv6 as tcp://\[ADDR\]:PORT"),
        ("tcp://[nope]:80", "is not an IPv6 address"),
        ("tcp://bad host:80", "not a valid host name"),
        ("ipc://", "has no socket path"),
        ("inproc://", "has no name"),
    ],
)
def test_malformed_addresses_say_what_is_wrong(text, message):
    with pytest.raises(AddressError, match=message):
        Address.parse(text)


def test_not_a_string():
    with pytest.raises(AddressError, match="must be a str"):
        Address.parse(5000)


def test_channel_transport_names():
    assert ChannelTransport.from_name("tcp") is ChannelTransport.TcpWithLocalhost
    assert ChannelTransport.from_name("Unix") is ChannelTransport.Unix
    assert ChannelTransport.from_name("ipc") is ChannelTransport.Unix
    assert ChannelTransport.from_name("local") is ChannelTransport.Local
    assert ChannelTransport.from_name("tcpwithhostname") is ChannelTransport.TcpWithHostname
    with pytest.raises(AddressError, match="unknown channel transport 'carrier-pigeon'"):
        ChannelTransport.from_name("carrier-pigeon")
    assert str(ChannelTransport.TcpWithLocalhost.any_address()) == "tcp://127.0.0.1:0"
    unix = ChannelTransport.Unix.any_address()
    assert unix.scheme == "ipc" and unix != ChannelTransport.Unix.any_address()
    assert ChannelTransport.Local.any_address().scheme == "inproc"


def test_tls_transports_listen_with_tls_and_pickle():
    import pickle

    for member in (ChannelTransport.Tls, ChannelTransport.MetaTlsWithHostname):
        address = member.any_address()
        assert address.scheme == "tls" and address.host == os.uname().nodename
        assert pickle.loads(pickle.dumps(member)) is member
    ipv6 = ChannelTransport.MetaTlsWithIpV6.any_address()
    assert ipv6.scheme == "tls" and ":" in ipv6.host
    assert str(ipv6).startswith("tls+tcp://[")
