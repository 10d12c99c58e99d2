"""On-disk cache of generated splits.

One gzip file per (generator version, task parameters, data seed). The file holds a header
line with the SHA-256 of the JSON payload, then the payload. A file that fails to decompress,
parse or match its checksum is treated as absent: the task is regenerated and the file
rewritten. Files are written to a temporary name in the same directory and moved into place
with ``os.replace``, so concurrent trials on one machine never read a half-written file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from locattn.tasks.base import Example

_MAGIC = "locattn-task-cache v2"


def default_cache_dir() -> Path:
    """``$LOCATTN_CACHE`` if set, else ``~/.cache/locattn``."""
    env = os.environ.get("LOCATTN_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "locattn"


def cache_key(params: dict[str, Any]) -> str:
    """sha1[:16] of the canonical JSON of ``params`` (generator version + params + seed)."""
    blob = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def cache_path(cache_dir: str | Path | None, task: str, params: dict[str, Any]) -> Path:
    """Where the cached splits of ``task`` with ``params`` live."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return root / "tasks" / f"{task}-{cache_key(params)}.json.gz"


def _encode_splits(splits: dict[str, list[Example]]) -> dict[str, list[list[Any]]]:
    return {
        name: [
            [" ".join(ex.src), " ".join(ex.tgt), None if ex.attn is None else list(ex.attn)]
            for ex in examples
        ]
        for name, examples in splits.items()
    }


def _decode_splits(raw: dict[str, list[list[Any]]]) -> dict[str, list[Example]]:
    return {
        name: [
            Example(
                tuple(src.split()),
                tuple(tgt.split()),
                None if attn is None else tuple(int(a) for a in attn),
            )
            for src, tgt, attn in rows
        ]
        for name, rows in raw.items()
    }


def payload_bytes(payload: dict[str, Any]) -> bytes:
    """Canonical JSON bytes (used for the checksum and for split hashing in tests)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()


def save(path: Path, params: dict[str, Any], splits: dict[str, list[Example]],
         vocab_tokens: list[str]) -> None:
    """Write the cache file atomically (temp file + ``os.replace``)."""
    payload = {"params": params, "vocab": vocab_tokens, "order": list(splits),
               "splits": _encode_splits(splits)}
    body = payload_bytes(payload)
    header = f"{_MAGIC} {hashlib.sha256(body).hexdigest()}\n".encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=1) as gz:
            gz.write(header + body)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def load(path: Path, params: dict[str, Any]) -> tuple[dict[str, list[Example]], list[str]] | None:
    """Cached (splits, vocab tokens), or None if the file is absent or corrupt (with a warning)."""
    if not path.exists():
        return None
    try:
        with gzip.open(path, "rb") as gz:
            data = gz.read()
        header, _, body = data.partition(b"\n")
        magic, _, digest = header.decode().rpartition(" ")
        if magic != _MAGIC:
            raise ValueError(f"bad header {header[:60]!r}")
        if hashlib.sha256(body).hexdigest() != digest:
            raise ValueError("checksum mismatch")
        payload = json.loads(body)
        if payload["params"] != json.loads(json.dumps(params)):
            raise ValueError("parameters differ from the cache key's")
        splits = _decode_splits(payload["splits"])  # keys were sorted on disk
        return {name: splits[name] for name in payload["order"]}, list(payload["vocab"])
    except Exception as exc:  # any failure means "regenerate"
        warnings.warn(f"Dataset cache {path} is unreadable ({exc}); regenerating it.", stacklevel=3)
        return None
