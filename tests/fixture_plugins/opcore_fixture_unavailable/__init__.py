"""Fixture whose device is missing."""
