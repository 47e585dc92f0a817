"""Database plumbing every layer may use, below all the apps: it imports Django only.

- prepared.py: reads of a fixed shape compiled to SQL once per connection (the API key and
  the sandbox every command reads).
"""
