import os

from django.core.wsgi import get_wsgi_application

from platform_site.private_files import restrict_umask

restrict_umask()  # what the process creates is its owner's alone (private_files.py)
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "platform_site.settings")
application = get_wsgi_application()
