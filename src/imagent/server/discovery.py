"""The discovery file: how ``imagent search`` finds a server already running on the same index.

While ``imagent serve`` listens it keeps ``<index>/.imagent-server.json`` (``{"url", "host", "port",
"pid", "token", "index"}``, mode 0600 because it holds the token) and removes it when it stops. A
reader trusts it only when its process is alive and the port answers, so a file left by a killed
server is ignored (and cleaned up by the next server). Standard library only: the CLI reads it before
importing anything heavy.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

FILENAME = ".imagent-server.json"


def discovery_path(index_root: str | Path) -> Path:
    return Path(index_root).expanduser() / FILENAME


def write_discovery(index_root: str | Path, host: str, port: int, token: str | None) -> Path | None:
    """Write the file atomically with mode 0600; None when the index folder is not writable."""
    path = discovery_path(index_root)
    connect = "127.0.0.1" if host in {"0.0.0.0", "", "::", "[::]"} else host
    url_host = f"[{connect}]" if ":" in connect and not connect.startswith("[") else connect
    data = {"url": f"http://{url_host}:{port}", "host": connect, "port": port, "pid": os.getpid(),
            "token": token, "index": str(Path(index_root).expanduser().resolve())}
    tmp = path.with_name(f"{FILENAME}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return path


def remove_discovery(index_root: str | Path) -> None:
    """Remove the file if this process wrote it (another server may have taken over the index)."""
    path = discovery_path(index_root)
    info = read_discovery(path)
    if info is not None and info.get("pid") == os.getpid():
        path.unlink(missing_ok=True)


def read_discovery(path: Path) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > 64 * 1024:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("port"), int) or not isinstance(data.get("pid"), int):
        return None
    return data


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except OSError:
        return False
    return True
