"""Tests of Sandhub spread over several Docker engines (a second dockerd over TCP with TLS)."""
