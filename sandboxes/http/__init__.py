"""What the HTTP interfaces (REST, the web pages) share and the others do not need: streamed
downloads."""
