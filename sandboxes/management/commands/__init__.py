"""`manage.py` commands of the sandboxes app."""
