#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
    from platform_site.private_files import restrict_umask

    restrict_umask()  # before anything is created: the database, secrets, disks (077)
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
