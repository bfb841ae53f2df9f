"""Writing run files: whole or not at all (re-exported from wildtrace.files, their shared home)."""

from wildtrace.files import FILE_MODE, write_json

__all__ = ["FILE_MODE", "write_json"]
