"""Every test here fails when it leaves procs running (``no_leaked_procs``)."""

from monarch_actor.testing import no_leaked_procs  # noqa: F401 (an autouse fixture)
