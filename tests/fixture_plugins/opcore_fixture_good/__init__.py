"""A well-behaved third-party plugin used by the tests."""
