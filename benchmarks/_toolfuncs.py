"""The tool functions every implementation registers.

No ``from __future__ import annotations`` here: lionagi 0.36.0's schema generator reads
``annotation.__name__`` and fails on string annotations.
"""

import time


async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first addend.
        b: the second addend.
    """
    return a + b


async def boom(a: int) -> int:
    """Always fail.

    Args:
        a: ignored.
    """
    raise ValueError(f"boom {a}")


def add_sync(a: int, b: int) -> int:
    """Add two integers, synchronously.

    Args:
        a: the first addend.
        b: the second addend.
    """
    return a + b


def nap_sync(a: int) -> int:
    """Block the calling thread briefly (a blocking tool).

    Args:
        a: returned unchanged.
    """
    time.sleep(0)
    return a
