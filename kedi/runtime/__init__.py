"""Kedi runtime: interpreter, scopes, values, types, Python bridge, scheduler."""
