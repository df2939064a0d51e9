"""The ``sparkindex`` command."""
