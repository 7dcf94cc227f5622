"""Fixture whose registration hook raises."""
