"""What a folder from elsewhere may name, and how its files are copied: a study folder, an
export folder (:mod:`locattn.offline`) or a worker's run folders come from other machines and
other people, so every path read from one is checked here, by one function.

- :func:`confined`: a name read from a folder (a run key, a seed folder, a file to drop) as a
  path inside a base folder; a run key must be 16 hex digits, and nothing may resolve outside
  the base (``..``, an absolute path, a symlink out of it).
- :func:`copy_regular`: copy a folder's regular files only, each of bounded size; a symlink
  (to a folder, a file or ``/dev/zero``), a device, a FIFO, a socket, a file over
  :data:`MAX_FILE_BYTES` or a sparse one is refused, named.

Standard library only (the offline worker and ``study import`` both use it).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

LEGACY_TRAIN_FN = "locattn.train:train"
"""The one ``train_fn`` an old ``study.json`` (formats 0 and 1) or export manifest may still
name: the trainer every study runs anyway. Any other value is refused, never imported: a
study's trainer is chosen by the code, never by a string read from a folder."""
#: A run key: the first 16 hex digits of a sha1 (``study.spec.keys.run_key``).
RUN_KEY = re.compile(r"[0-9a-f]{16}")
#: Largest file a copy takes (a trainer checkpoint of the paper's models is a few MB).
MAX_FILE_BYTES = 1 << 30
#: Largest folder a copy takes, all its files together.
MAX_TOTAL_BYTES = 8 << 30
#: A file over this size whose blocks hold less than half its length is sparse: refused (it
#: would be written out whole).
SPARSE_MIN_BYTES = 1 << 20


class FolderError(ValueError):
    """A folder names a path outside itself, or holds what a copy refuses: one line naming it."""


def confined(base: str | Path, name: object, *, what: str, key: bool = False) -> Path:
    """``base/name`` resolved, where ``name`` was read from a folder (``what`` says where, for
    the error); :class:`FolderError` unless it is a plain relative path that resolves inside
    ``base`` (symlinks followed) and, with ``key``, a run key (:data:`RUN_KEY`)."""
    if key and not (isinstance(name, str) and RUN_KEY.fullmatch(name)):
        raise FolderError(f"{what}: run key {name!r} is not 16 hex digits")
    if not isinstance(name, str) or not name:
        raise FolderError(f"{what}: {name!r} is not a path name")
    root = Path(base).resolve()
    path = (root / name).resolve()
    if Path(name).is_absolute() or path == root or not path.is_relative_to(root):
        raise FolderError(f"{what}: {name!r} is outside {root}")
    return path


def copy_regular(src: str | Path, dst: str | Path, *, what: str, max_file: int = MAX_FILE_BYTES,
                 max_total: int = MAX_TOTAL_BYTES) -> int:
    """Copy the folder ``src`` to the new folder ``dst``: folders and regular files only, never
    following a link; bytes copied. :class:`FolderError` names the first entry refused (a
    symlink, a device, a FIFO, a socket, a file over ``max_file`` or sparse, or a folder over
    ``max_total``); ``dst`` is then partly written, and the caller removes it."""
    src, dst = Path(src), Path(dst)
    info = os.lstat(src)
    if not stat.S_ISDIR(info.st_mode):
        raise FolderError(f"{what}: {src} is {_kind(info.st_mode)}, not a folder")
    total = 0
    os.makedirs(dst)
    for entry in sorted(os.scandir(src), key=lambda e: e.name):
        info = entry.stat(follow_symlinks=False)
        target = dst / entry.name
        if stat.S_ISDIR(info.st_mode):
            total += copy_regular(entry.path, target, what=what, max_file=max_file, max_total=max_total - total)
            continue
        if not stat.S_ISREG(info.st_mode):
            raise FolderError(f"{what}: {entry.path} is {_kind(info.st_mode)}: only regular files are copied")
        total += _copy_file(Path(entry.path), target, what=what, max_file=max_file)
        if total > max_total:
            raise FolderError(f"{what}: {src} holds over {max_total} bytes: not copied")
    return total


def _copy_file(src: Path, dst: Path, *, what: str, max_file: int) -> int:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:  # a symlink swapped in since the listing (ELOOP), unreadable, ...
        raise FolderError(f"{what}: {src}: {exc.strerror}: not copied") from None
    try:
        info = os.fstat(fd)  # the file opened, not the name checked before (it may have changed)
        if not stat.S_ISREG(info.st_mode):
            raise FolderError(f"{what}: {src} is {_kind(info.st_mode)}: only regular files are copied")
        if info.st_size > max_file:
            raise FolderError(f"{what}: {src} is {info.st_size} bytes, over the {max_file} a file may be")
        if info.st_size > SPARSE_MIN_BYTES and info.st_blocks * 512 < info.st_size // 2:
            raise FolderError(f"{what}: {src} is a sparse file ({info.st_size} bytes, "
                              f"{info.st_blocks * 512} on disk): not copied")
        done = 0
        with open(dst, "xb") as out:
            while chunk := os.read(fd, 1 << 20):
                done += len(chunk)
                if done > max_file:
                    raise FolderError(f"{what}: {src} grew past the {max_file} bytes a file may be")
                out.write(chunk)
        os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))
        return done
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"
