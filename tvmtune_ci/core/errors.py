"""One error base; each subclass carries the exit code `main()` returns for it."""

from __future__ import annotations


class TvmtuneError(Exception):
    """Base of every error the tool reports without a traceback."""

    exit_code = 1


class ConfigError(TvmtuneError):
    """tvmtune.yaml, a template's declarations or the command line are wrong."""

    exit_code = 2


class UsageError(ConfigError):
    """Bad command-line usage (unknown operator, bad date, ...)."""


class TemplateError(TvmtuneError):
    """An operator template cannot be read or does not follow the template API.

    `file` and `line` say where (None when unknown); the message reads
    "FILE:LINE: what is wrong" so a terminal and an editor can jump there.
    """

    exit_code = 2

    def __init__(self, message: str, *, file: object = None, line: int | None = None) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line if line else None
        where = (f"{self.file}:{self.line}: " if self.line else f"{self.file}: ") if self.file else ""
        super().__init__(where + message)


class ModelError(TvmtuneError):
    """A model of `models:` cannot be loaded or exported (names its source and the fix)."""

    exit_code = 2


class CorruptFileError(TvmtuneError):
    """A file we wrote (log, manifest) cannot be parsed; names the path to inspect."""

    exit_code = 3


class StaleLogError(TvmtuneError):
    """A committed log does not describe its template/target any more."""

    exit_code = 4


class HostError(TvmtuneError):
    """This machine cannot measure the requested target."""

    exit_code = 5


class LockError(TvmtuneError):
    """Another process holds the log folder's lock."""

    exit_code = 6


class TuningError(TvmtuneError):
    """Tuning stopped: wrong template, noisy runner, every measurement failed, ..."""

    exit_code = 7


class GitError(TvmtuneError):
    """A git operation (commit, push) failed."""

    exit_code = 8


class DeviceError(TvmtuneError):
    """The RPC tracker or its devices cannot serve the run."""

    exit_code = 9


class PublishError(TvmtuneError):
    """A new log set cannot be published without touching files that are not ours."""

    exit_code = 10
