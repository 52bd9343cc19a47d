"""Files and directories Mercato creates for its own data: private to the user that runs it.

Under the usual umask (022) a new directory is 0755 and a new SQLite database 0644, so password
hashes and sealed credentials would be readable by every local user. What Mercato creates is made
0700 (directories) and 0600 (files) whatever the umask; what exists already is left as its owner
set it (decision 0521).
"""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def ensure_private_dir(path: Path) -> None:
    """Create the directory `path` 0700 if it does not exist (missing parents as usual).

    Raises OSError as `Path.mkdir` does; an existing directory is not touched.
    """
    if path.is_dir():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=PRIVATE_DIR_MODE)
    except FileExistsError:
        if not path.is_dir():
            raise
        return  # made by another process meanwhile: it chose its mode
    os.chmod(path, PRIVATE_DIR_MODE)  # mkdir's mode is masked by the umask; this is not


def create_private_file(path: Path) -> bool:
    """Create `path` empty and 0600 unless something is there already; True when created.

    Never follows a symbolic link planted at `path` (O_NOFOLLOW, O_EXCL): a link there counts
    as existing and is left alone, for the caller's open to judge.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        descriptor = os.open(path, flags, PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)  # the umask could have taken owner bits
    finally:
        os.close(descriptor)
    return True
