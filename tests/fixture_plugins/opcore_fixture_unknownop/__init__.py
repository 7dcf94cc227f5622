"""Fixture registering a kernel for an op nobody defined."""
