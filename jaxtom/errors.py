"""Errors in what the user gave (a path, a file, a directory), as opposed to bugs.

The command line prints a `UserError` as one line and exits with status 2 (`jaxtom.cli`);
any other exception keeps its traceback. Each kind also subclasses the built-in type callers
already catch (FileNotFoundError, ValueError, OSError), so library code that caught those
still does. A message names the path, what is wrong with it and what was expected.
"""

from __future__ import annotations


class UserError(Exception):
    """An input the user gave cannot be used; the message says which and why."""


class MissingInputError(UserError, FileNotFoundError):
    """A model, checkpoint, tokenizer or run directory that should exist does not."""


class BadInputError(UserError, ValueError):
    """A file exists but is truncated, garbled or of the wrong kind, or a setting cannot
    work with the storage it names."""


class StorageError(UserError, OSError):
    """A directory a command must create, read or write cannot be."""
