"""The ``placeopt`` command line (click). Commands live in ``cmd_*.py`` modules."""
