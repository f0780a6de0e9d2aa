"""``monarch._rust_bindings.monarch_hyperactor.config``: message encodings.

Exists for Monarch compatibility: Monarch's own examples and tests import ``Encoding``
through this internal path. The object is the public one of ``monarch.config``; new code
should import from there.
"""

from monarch.config import Encoding

__all__ = [
    "Encoding",
]
