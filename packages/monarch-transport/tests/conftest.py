import os

from hypothesis import HealthCheck, settings

# `dev` keeps the edit-test loop quick; `ci` (chosen when CI is set) digs deeper.
settings.register_profile("dev", max_examples=40, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
