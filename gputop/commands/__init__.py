"""The non-interactive commands behind cli.py."""
