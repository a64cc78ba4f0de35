"""User-facing errors: the command line prints their message as one line and exits with status 2."""


class LegoError(Exception):
    """Bad input from a user: a malformed sentence, an invalid config, a mismatched run directory."""


class ConfigError(LegoError):
    """An invalid configuration value or key."""


class ParseError(LegoError):
    """A sentence that is not a valid LEGO sentence."""


class Interrupted(Exception):
    """A run stopped by SIGINT or SIGTERM after saving a checkpoint; exit status 128 + signal."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum

    def __reduce__(self):  # a worker of `reproduce --jobs` sends it to its parent pickled
        return type(self), (self.signum, str(self))
