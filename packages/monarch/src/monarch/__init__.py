"""Monarch in Python: the public API of Meta's Monarch, re-exported from the
packages that implement it (``monarch_mesh``, ``monarch_transport``,
``monarch_actor``). Scripts written for Monarch import from here unchanged.

>>> from monarch.actor import Actor, endpoint, this_proc
>>> class Echo(Actor):
...     @endpoint
...     def echo(self, value: int) -> int:
...         return value
>>> this_proc().spawn("echo", Echo).echo.call_one(7).get()
7
"""

from monarch_actor import Future
from monarch_mesh import Extent, NDSlice, Point, Selection, Shape, Slice

__all__ = ["Extent", "Future", "NDSlice", "Point", "Selection", "Shape", "Slice"]

__version__ = "0.1.0"
