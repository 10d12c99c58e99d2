"""Reading a spec file: a safe YAML loader that refuses duplicate keys, aliases and deep nesting,
and one-line :class:`SpecError` messages for files that are missing, binary or not YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from study.spec.checks import MAX_SPEC_BYTES, MAX_YAML_DEPTH, TOP_KEYS, SpecError


def _spec_loader() -> type:
    """A safe YAML loader for specs. It refuses a mapping with the same key twice (PyYAML keeps
    the last), aliases (``*name``: a few lines of them expand to gigabytes) and nesting deeper
    than :data:`MAX_YAML_DEPTH` (PyYAML composes recursively)."""
    class SpecLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()
            line = event.start_mark.line + 1
            if isinstance(event, yaml.AliasEvent):
                raise SpecError(f"line {line}: YAML alias *{event.anchor}: a spec may not use "
                                "aliases; write the value out")
            if self.depth >= MAX_YAML_DEPTH:
                raise SpecError(f"line {line}: nested deeper than {MAX_YAML_DEPTH} levels")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if not isinstance(key, (str, int, float, bool, type(None))):  # a list or mapping as a key
                raise SpecError(f"line {key_node.start_mark.line + 1}: a key is a name, not a "
                                f"{type(key).__name__}")
            if key in seen:
                raise SpecError(
                    f"duplicate key {key!r} (lines {seen[key]} and {key_node.start_mark.line + 1}); "
                    "YAML would silently keep the last value: keep one")
            seen[key] = key_node.start_mark.line + 1
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    SpecLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return SpecLoader


def read_yaml(path: str | Path) -> dict:
    """Read a spec file; a missing, binary or unreadable file, bad YAML or a duplicate key is a
    :class:`SpecError`."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{path}: no such spec file")
    try:
        size = p.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError(f"{path}: {size:,} bytes; a spec file is at most {MAX_SPEC_BYTES:,}")
        blob = p.read_bytes()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the spec file ({exc.strerror or exc})") from None
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not a text (UTF-8) YAML file: undecodable byte at offset "
                        f"{exc.start}") from None
    if "\x00" in text:
        raise SpecError(f"{path}: not a text YAML file (it contains NUL bytes)")
    try:
        data = yaml.load(text, Loader=_spec_loader())  # noqa: S506 - a SafeLoader subclass
    except SpecError as exc:
        raise SpecError(f"{path}: {exc}") from None
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to read") from None
    except ValueError as exc:  # an integer of over 4,300 digits (Python's int-from-text limit)
        raise SpecError(f"{path}: a value it holds cannot be read: {str(exc).split(';')[0]}") from None
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())
        raise SpecError(f"{path}: not valid YAML: {first}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a spec is a mapping of keys {sorted(TOP_KEYS)}")
    return data
