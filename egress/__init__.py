"""The egress proxy: the one way out of a sandbox whose network is on (issue 27).

A library of its own with no Django in it: the platform gives it a PolicySource (which
sandbox a connection comes from, what it may reach, the secrets bound to destinations) and
runs it (`manage.py egressproxy`, or egress.thread in tests and benches).
"""
