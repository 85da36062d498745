"""Keep solver libraries off stdout.

HiGHS prints its banner when a solver object is made and its log while it
runs, from C++ straight to file descriptor 1, past Python's sys.stdout; CBC
runs as a child process that inherits that descriptor. stdout carries only
meshtune's document or report, so during a solve descriptor 1 points at
stderr (`verbose`) or at the null device.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so text a library buffered while descriptor 1
    was redirected goes where it was redirected to."""
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no C library handle on this platform
        pass


@contextmanager
def solver_output(verbose: bool) -> Iterator[None]:
    """Point descriptor 1 at stderr (verbose) or the null device meanwhile."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass
    try:
        saved = os.dup(1)
    except OSError:  # no descriptor 1 at all: nothing can reach stdout
        yield
        return
    target = os.dup(2) if verbose else os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(target, 1)
    finally:
        os.close(target)
    try:
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, 1)
        os.close(saved)
