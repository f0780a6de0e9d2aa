"""What a connection is configured with: the job's secret, size limits,
timeouts and TLS files. Defaults come from the environment, so every process
of a job agrees without being told."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from ._address import Address
from ._auth import job_secret
from ._config import MAX_MESSAGE_SIZE, TLS_CA, TLS_CERT, TLS_KEY
from ._errors import TransportError
from ._integrity import MODES, default_mode

__all__ = [
    "DEFAULT_MAX_SIZE",
    "DEFAULT_MAX_UNAUTHENTICATED",
    "MAX_SIZE_ENV",
    "TLS_ENV",
    "Settings",
    "TlsFiles",
]

MAX_SIZE_ENV: Final = MAX_MESSAGE_SIZE.env[0]
DEFAULT_MAX_SIZE: Final = MAX_MESSAGE_SIZE.default
# connections still authenticating that a listener holds at once; a real peer
# is past the handshake within a round trip, so 64 only fills up under attack
DEFAULT_MAX_UNAUTHENTICATED: Final = 64
TLS_ENV: Final = ("HYPERACTOR_TLS_CA", "HYPERACTOR_TLS_CERT", "HYPERACTOR_TLS_KEY")
"""The environment variables naming the PEM files of the CA, this side's certificate
and its key, in that order; ``TlsFiles.from_env`` reads them."""


def _default_max_size() -> int:
    return MAX_MESSAGE_SIZE.get()


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for ``tls+tcp://`` addresses: the CA that signed the peers'
    certificates, and this side's certificate and key. ``TlsFiles.from_env()``
    reads Monarch's ``HYPERACTOR_TLS_CA``/``_CERT``/``_KEY``.

    Args:
        ca: the path of the CA certificate that signed the peers' certificates.
        cert: the path of this side's certificate.
        key: the path of this side's private key.
        server_name: the name a connecting side expects on the listener's
            certificate; ``None`` expects the address's host.

    Attributes:
        ca: the path of the CA certificate.
        cert: the path of this side's certificate.
        key: the path of this side's private key.
        server_name: the name expected on the listener's certificate, or ``None``
            for the address's host.
    """

    ca: str
    cert: str
    key: str
    server_name: str | None = None  # what a connecting side expects; default: the host

    @staticmethod
    def from_env() -> TlsFiles | None:
        """The files named by ``$HYPERACTOR_TLS_*``; ``None`` when none is set.

        Raises:
            TransportError: some of the three variables are set, but not all.
        """
        paths = [TLS_CA.get(), TLS_CERT.get(), TLS_KEY.get()]
        if not any(paths):
            return None
        missing = [name for name, path in zip(TLS_ENV, paths, strict=True) if not path]
        if missing:
            raise TransportError(
                f"TLS needs all of {', '.join(TLS_ENV)}; missing {', '.join(missing)}"
            )
        return TlsFiles(*paths)  # type: ignore[arg-type]

    def read(self) -> tuple[str, str, str]:
        """The CA, certificate and key as PEM text.

        Raises:
            TransportError: a file cannot be read.
        """
        try:
            return tuple(open(path).read() for path in (self.ca, self.cert, self.key))  # type: ignore[return-value]
        except OSError as error:
            raise TransportError(f"cannot read a TLS file: {error}") from error


@dataclass(frozen=True)
class Settings:
    """What both sides of a connection must agree on, and local limits.

    Every default comes from the environment, so ``Settings()`` is what the job's
    processes agree on.

    Args:
        secret: the job's secret; default: ``$MONARCH_JOB_SECRET`` (see
            ``job_secret``).
        max_message_size: the largest message, in bytes, accepted or sent;
            default: ``$MONARCH_MAX_MESSAGE_SIZE``, else 4 GiB.
        handshake_timeout: seconds a peer gets to authenticate (and a connecting
            side gets to connect).
        queue_depth: messages a listener buffers before its senders wait.
        name: how a sender introduces itself to the listener (``Peer.name``).
        tls: the certificates for ``tls+tcp://`` addresses; default:
            ``$HYPERACTOR_TLS_*``, else ``None``.
        integrity: when a listener demands that messages after the handshake carry
            a MAC: ``"always"``; ``"auto"``, except over TLS, Unix sockets and
            loopback TCP; ``"off"``, never. Default: ``$MONARCH_TRANSPORT_INTEGRITY``,
            else ``"auto"``.
        max_unauthenticated: connections a listener lets authenticate at once;
            more are closed at once.

    Attributes:
        secret: the job's secret.
        max_message_size: the largest message, in bytes, accepted or sent.
        handshake_timeout: seconds a peer gets to authenticate.
        queue_depth: messages a listener buffers before its senders wait.
        name: how a sender introduces itself to the listener.
        tls: the certificates for ``tls+tcp://`` addresses, or ``None``.
        integrity: ``"always"``, ``"auto"`` or ``"off"``: when a listener demands
            MACs on messages.
        max_unauthenticated: connections a listener lets authenticate at once.

    Raises:
        TransportError: ``integrity`` is not a known mode, ``max_unauthenticated``
            is below 1, or an environment variable a default comes from is invalid
            (``AuthenticationError`` for ``$MONARCH_JOB_SECRET``).
    """

    secret: bytes = field(default_factory=job_secret)
    max_message_size: int = field(default_factory=_default_max_size)
    handshake_timeout: float = 5.0
    queue_depth: int = 1024
    name: str = ""
    tls: TlsFiles | None = field(default_factory=TlsFiles.from_env)
    integrity: str = field(default_factory=default_mode)
    max_unauthenticated: int = DEFAULT_MAX_UNAUTHENTICATED

    def __post_init__(self) -> None:
        if self.integrity not in MODES:
            raise TransportError(
                f"integrity must be one of {', '.join(MODES)}, got {self.integrity!r}"
            )
        if self.max_unauthenticated < 1:
            raise TransportError("max_unauthenticated must be at least 1")

    def tls_files(self, address: Address) -> TlsFiles:
        """The TLS files for ``address``; a clear error when there are none.

        Args:
            address: the ``tls+tcp://`` address they are for, named in the error.

        Raises:
            TransportError: no TLS files are configured.
        """
        if self.tls is None:
            raise TransportError(
                f"{address} is a TLS address but no certificates are configured: set "
                f"{', '.join(TLS_ENV)} (PEM file paths) or pass Settings(tls=TlsFiles(...))"
            )
        return self.tls
