#!/usr/bin/env python3
"""Django entry point for the loopback OIDC test provider (see README.md)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "idp.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
