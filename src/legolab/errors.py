"""User-facing errors: the command line prints their message as one line and exits with status 2."""


class LegoError(Exception):
    """Bad input from a user: a malformed sentence, an invalid config, a mismatched run directory."""


class ConfigError(LegoError):
    """An invalid configuration value or key."""


class ParseError(LegoError):
    """A sentence that is not a valid LEGO sentence."""
