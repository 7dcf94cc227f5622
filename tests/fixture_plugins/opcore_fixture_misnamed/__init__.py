"""Fixture whose backend name differs from its entry point."""
