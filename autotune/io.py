"""File output that never leaves a half-written file behind.

Guarantees (docs/reliability.md): an output path is checked before any work
is done (:func:`check_output_path`); a file is written to a temporary file
in the same folder and renamed over the target, so readers see the old file
or the new one, never a partial one; only a missing path or an existing
regular file is ever replaced (never a folder, symlink, device, FIFO or
socket); a replaced file keeps its permission bits and a new one gets the
usual ones (0666 less the umask); the temporary file is removed on any
failure or interruption; permission and file-system problems are bad input
(exit 2) naming the path the user gave, never the temporary name.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from autotune.errors import InputError

MAX_NAME_BYTES = 255  # one path component, as on ext4, XFS, APFS and NTFS


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_output_path(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """Check that `path` can be written as an output before any work is
    done: its folder exists and is writable, and the path is missing or an
    existing, writable regular file. Returns it as a Path; raises InputError."""
    target = Path(path)
    shown = str(path)
    name = target.name
    if not name or name in (".", ".."):
        raise InputError("names a folder, not a file", file=shown, field=option, fix="name a file")
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise InputError(
            f"has a file name longer than {MAX_NAME_BYTES} bytes",
            file=shown,
            field=option,
            fix="choose a shorter name",
        )
    folder = target.parent if str(target.parent) else Path(".")
    try:
        if not folder.is_dir():
            raise InputError(
                "the output folder does not exist",
                file=shown,
                field=option,
                fix=f"create {folder} first or choose another {option} path",
            )
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(
                "the output folder is not writable",
                file=shown,
                field=option,
                fix=f"choose a folder you can write to, or change {folder}'s permissions",
            )
        try:
            info = os.lstat(target)
        except FileNotFoundError:
            return target
    except OSError as exc:
        raise InputError(
            f"cannot be written: {exc.strerror or type(exc).__name__}",
            file=shown,
            field=option,
            fix=f"choose another {option} path",
        ) from None
    if not stat.S_ISREG(info.st_mode):
        kind = (
            "a folder"
            if stat.S_ISDIR(info.st_mode)
            else "a symlink"
            if stat.S_ISLNK(info.st_mode)
            else "a device, FIFO or socket"
        )
        raise InputError(
            f"exists and is {kind}; only a regular file is ever replaced",
            file=shown,
            field=option,
            fix=f"remove it or choose another {option} path",
        )
    if not os.access(target, os.W_OK):
        raise InputError(
            "exists and is not writable",
            file=shown,
            field=option,
            fix=f"change its permissions or choose another {option} path",
        )
    return target


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, option: str = "--out") -> None:
    """Write `data` to `path` through a temporary file in the same folder and
    an atomic rename (see the module docstring for the guarantees)."""
    target = check_output_path(path, option)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
        tmp = None
    except OSError as exc:
        raise InputError(
            f"could not be written: {exc.strerror or type(exc).__name__}",
            file=str(path),
            field=option,
            fix=f"check the disk and permissions, or choose another {option} path",
        ) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def atomic_write_text(path: str | os.PathLike[str], text: str, option: str = "--out") -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), option)
