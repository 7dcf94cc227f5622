"""Fixture reusing the name of another backend."""
