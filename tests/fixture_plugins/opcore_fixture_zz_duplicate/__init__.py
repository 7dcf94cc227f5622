"""Fixture reusing the name of another backend (fixture_twin)."""
