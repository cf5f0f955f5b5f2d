"""How ``--help`` shows a flag: its help text, then its default when the text does not say it.

argparse's own ArgumentDefaultsHelpFormatter appends "(default: X)" to every flag, even those
whose help already names the default in words ("pack (default)"), and shows empty defaults as
"(default: )". This one appends only when the help text does not mention a default and the
default is worth showing (not None, False, an empty string or list).
"""

from __future__ import annotations

import argparse


def shows_default(action: argparse.Action) -> bool:
    """Whether the help line should end with the default (and otherwise already does)."""
    default = action.default
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    if isinstance(default, str | list | tuple) and not default:
        return False
    return bool(action.option_strings) or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if text and "default" not in text.lower() and shows_default(action):
            text += " (default: %(default)s)"
        return text
