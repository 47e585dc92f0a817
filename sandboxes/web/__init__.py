"""The team web pages: server-rendered templates with htmx. Views call services only."""
