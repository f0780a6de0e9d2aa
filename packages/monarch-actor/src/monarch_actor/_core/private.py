"""Files only this user may read: the per-user folder where a running job
leaves what its own user's tools need to reach it (the debugger's and the
admin server's addresses and credentials), and the checks every file that
holds a credential passes before it is believed.

Another local user must neither read these files nor plant one that a job
or a tool then trusts, so a folder or file is accepted only when this user
owns it and no one else may write it (and, for anything secret, read it).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

from .errors import MonarchError

__all__ = [
    "PrivateFileError",
    "alive",
    "check_private",
    "private_dir",
    "publish_record",
    "read_private",
    "read_records",
    "remove_record",
    "write_private",
]

STATE_DIR_ENV = "MONARCH_STATE_DIR"


class PrivateFileError(MonarchError, PermissionError):
    """A file or folder that should be this user's alone is not: another user
    owns it, or others may read or write it. The message names the path and
    the command that fixes it."""


def check_private(path: str | os.PathLike[str], what: str, *, secret: bool = True) -> None:
    """Refuse ``path`` unless this user owns it and no other user may write it
    (nor read it, when ``secret``).

    Args:
        path: the file or folder.
        what: what it is, for the error (``"MONARCH_JOB_SECRET_FILE"``, ...).
        secret: whether others must not read it either.

    Raises:
        PrivateFileError: it is another user's, or open to others.
        OSError: it cannot be looked at (missing, ...).
    """
    info = os.stat(path)
    if info.st_uid != os.geteuid():
        raise PrivateFileError(
            f"{what} {str(path)!r} belongs to uid {info.st_uid}, not to this user "
            f"(uid {os.geteuid()}): another user could have planted it; remove it or use a "
            "path of your own"
        )
    mask = 0o077 if secret else 0o022
    if info.st_mode & mask:
        mode = stat.S_IMODE(info.st_mode)
        want = (0o700 if stat.S_ISDIR(info.st_mode) else 0o600) if secret else 0o755
        raise PrivateFileError(
            f"{what} {str(path)!r} has mode {mode:04o}: other users may "
            f"{'read or write' if secret else 'write'} it. Run: chmod {want:o} {path}"
        )


def private_dir(*parts: str) -> Path:
    """This user's own folder for Monarch's state, made (mode 0700) on first
    use: ``$MONARCH_STATE_DIR``, else ``$XDG_RUNTIME_DIR/monarch``, else
    ``~/.local/state/monarch`` when the home folder is this user's, else
    ``/tmp/monarch-<uid>``. ``parts`` name a subfolder, made the same way.

    Raises:
        PrivateFileError: the folder exists but is not this user's alone.
    """
    folder = _base()
    for part in ("", *parts):
        folder = folder / part if part else folder
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700, parents=True)
        check_private(folder, "Monarch's state folder")
    return folder


def _base() -> Path:
    configured = os.environ.get(STATE_DIR_ENV)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _owned(runtime):
        return Path(runtime) / "monarch"
    home = Path.home()
    if _owned(home):
        return home / ".local" / "state" / "monarch"
    return Path(tempfile.gettempdir()) / f"monarch-{os.geteuid()}"


def _owned(path: str | Path) -> bool:
    try:
        info = os.stat(path)
    except OSError:
        return False
    return info.st_uid == os.geteuid() and not info.st_mode & 0o022


def write_private(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` readable by this user only (mode 0600),
    replacing it whole: a reader sees the old file or the new one.

    Args:
        path: the file to write; its folder must exist.
        data: what it holds.
    """
    folder = os.path.dirname(os.fspath(path)) or "."
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tmp-")  # mkstemp makes it 0600
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def read_private(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of ``path`` once it passes ``check_private``.

    Args:
        path: the file to read.
        what: what it is, for the error.

    Raises:
        PrivateFileError: it is another user's, or open to others.
        OSError: it cannot be read.
    """
    with open(path, "rb") as file:
        info = os.fstat(file.fileno())  # the file read is the file checked
        if info.st_uid != os.geteuid() or info.st_mode & 0o077:
            check_private(path, what)  # says why
            raise PrivateFileError(f"{what} {os.fspath(path)!r} changed while it was read")
        return file.read()


def _record_path(kind: str, pid: int) -> Path:
    return private_dir("jobs") / f"{pid}-{kind}.json"


def publish_record(kind: str, record: dict[str, Any]) -> Path:
    """Leave ``record`` (JSON) where this user's tools find it, as
    ``kind`` for this process; it is removed by ``remove_record`` or when the
    process is gone (readers skip records of dead processes).

    Args:
        kind: what it describes: ``"debug"``, ``"admin"``.
        record: what a tool needs to reach it (address, credentials).

    Returns:
        The file written.
    """
    path = _record_path(kind, os.getpid())
    write_private(path, json.dumps({**record, "pid": os.getpid()}).encode())
    return path


def remove_record(kind: str) -> None:
    """Take back this process's record of ``kind``, if there is one.

    Args:
        kind: what it described (``"debug"``, ``"admin"``).
    """
    with contextlib.suppress(OSError, PrivateFileError):
        _record_path(kind, os.getpid()).unlink()


def read_records(kind: str) -> list[dict[str, Any]]:
    """The records of ``kind`` that live processes of this user published,
    newest first. Files that fail ``check_private`` or do not parse are skipped.

    Args:
        kind: what they describe (``"debug"``, ``"admin"``).
    """
    try:
        folder = private_dir("jobs")
    except (OSError, PrivateFileError):
        return []
    found: list[tuple[float, dict[str, Any]]] = []
    for path in folder.glob(f"*-{kind}.json"):
        try:
            record = json.loads(read_private(path, "a Monarch job record"))
            pid = int(record["pid"])
        except (OSError, ValueError, KeyError, TypeError, PrivateFileError):
            continue
        if not alive(pid):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        found.append((path.stat().st_mtime, record))
    return [record for _, record in sorted(found, key=lambda item: -item[0])]


def alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (of any user).

    Args:
        pid: the process id.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
