"""The one exception type for mistakes in what the user gave us.

``main.py`` prints a :class:`UserError` as a single ``main.py: error: ...`` line and
exits with code 2; anything else is a bug and keeps its traceback. Messages say what
was wrong, the offending value, and how to fix it.
"""

from __future__ import annotations

import argparse
from typing import NoReturn


class UserError(Exception):
    """Bad input from the user: a flag, a setting, an env id, a file."""


class OneLineParser(argparse.ArgumentParser):
    """argparse for every command: a bad flag is a UserError (one line), not a usage block."""

    def error(self, message: str) -> NoReturn:
        raise UserError(f"{message} (see python {self.prog} --help)")
