"""Fixture whose plugin module fails to import."""
