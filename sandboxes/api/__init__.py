"""The REST API (DRF) under /api/v1/: thin views over sandboxes.services.

base.py: the acting principal, errors as JSON, the schema's shared parts; views.py and
files.py: the endpoints; serializers.py: request and response shapes (responses derived from
the service results); parsers.py: the JSON body limit; urls.py: the routes.

Nothing is imported here: DRF loads parsers.py from the settings while rest_framework.views is
itself still loading, so importing this package must not import any view.
"""
