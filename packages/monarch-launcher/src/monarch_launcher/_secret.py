"""The job secret a job's workers and its controller share.

Workers started by a job get the secret in their environment; the controller
adopts it before it attaches. A job remembers the secret it gave its workers
(so a later script that loads the job from its cache can attach), which makes
a dumped job file as sensitive as the secret: it is written readable by its
owner only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from monarch_transport import SECRET_ENV

from ._errors import JobError

__all__ = ["SECRET_ENV", "SECRET_FILE_ENV", "current_secret", "adopt_secret", "secret_for_workers"]

SECRET_FILE_ENV = "MONARCH_JOB_SECRET_FILE"


def current_secret() -> str | None:
    """The secret this process uses: ``$MONARCH_JOB_SECRET``, else the
    contents of the file ``$MONARCH_JOB_SECRET_FILE`` names, else None."""
    text = os.environ.get(SECRET_ENV)
    if text:
        return text.strip()
    path = os.environ.get(SECRET_FILE_ENV)
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as error:
            raise JobError(
                f"{SECRET_FILE_ENV}={path!r} cannot be read ({error}): fix the path or unset it"
            ) from None
    return None


def secret_for_workers() -> str:
    """The secret to give workers a job starts: this process's own if it has
    one, else a new one, which this process adopts at once (so that the
    runtime, when it starts, uses the same)."""
    found = current_secret()
    if found is not None:
        return found
    made = secrets.token_hex(32)
    os.environ[SECRET_ENV] = made
    return made


def adopt_secret(secret: str | None, what: str) -> None:
    """Use ``secret`` (the one ``what``'s workers were given) in this process
    before attaching to them; an error if this process already has another."""
    if secret is None:
        return
    found = current_secret()
    if found is None:
        os.environ[SECRET_ENV] = secret
        return
    if found != secret:
        raise JobError(
            f"{what}'s workers were started with another job secret than this process's "
            f"{SECRET_ENV}, so they would refuse it. Unset {SECRET_ENV} (and "
            f"{SECRET_FILE_ENV}) before this script starts Monarch so that the job's secret is "
            "used, or kill the job (`monarch job kill`) and apply it again from here"
        )
