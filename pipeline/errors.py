"""The one exception type for mistakes in what the user gave us.

``main.py`` prints a :class:`UserError` as a single ``main.py: error: ...`` line and
exits with code 2; anything else is a bug and keeps its traceback. Messages say what
was wrong, the offending value, and how to fix it.
"""


class UserError(Exception):
    """Bad input from the user: a flag, a setting, an env id, a file."""
