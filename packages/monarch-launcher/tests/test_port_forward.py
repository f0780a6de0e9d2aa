"""PortForwarder: TCP connections to a source process's port reach a service
through the destination process at the same coordinates; real processes."""

import socket
import socketserver
import threading

import pytest

from monarch_actor import ActorError, this_host, this_proc
from monarch_launcher import PortForwarder


class _Echo(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        while line := self.rfile.readline():
            self.wfile.write(b"echo " + line)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def echo_server():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_a_forward_relays_connections_both_ways_until_the_forwarder_stops(echo_server):
    servers = this_host().spawn_procs(per_host={"gpus": 1})
    clients = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        forwarder = this_proc().spawn("port_forwarder", PortForwarder)
        ports = [_free_port()]
        forwarder.forward.call_one(servers, echo_server, clients, f"127.0.0.1:{ports[0]}").get(
            timeout=60
        )
        for port in ports * 2:  # two connections, one after the other
            with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                conn.sendall(b"hello\n")
                reader = conn.makefile("rb")
                assert reader.readline() == b"echo hello\n"
                conn.sendall(b"again\n")
                assert reader.readline() == b"echo again\n"
        forwarder.stop().get(timeout=60)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", ports[0]), timeout=30).close()
    finally:
        servers.stop().get(timeout=60)
        clients.stop().get(timeout=60)


def test_meshes_of_different_shapes_are_refused():
    one = this_host().spawn_procs(per_host={"gpus": 1})
    two = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        forwarder = this_proc().spawn("port_forwarder_bad", PortForwarder)
        with pytest.raises(ActorError, match="same shape"):
            forwarder.forward.call_one(one, 1234, two, "127.0.0.1:1").get(timeout=60)
        with pytest.raises(ActorError, match="1 through 65535"):
            forwarder.forward.call_one(one, 0, one, "127.0.0.1:1").get(timeout=60)
    finally:
        one.stop().get(timeout=60)
        two.stop().get(timeout=60)
