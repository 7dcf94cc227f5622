"""Fixture whose backend name another distribution claims too (opcore_fixture_zz_duplicate)."""
