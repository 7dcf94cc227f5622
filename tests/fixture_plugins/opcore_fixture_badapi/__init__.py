"""Fixture built for another plugin API version."""
